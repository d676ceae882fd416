"""A stream for a partition this gateway does not own, sent back to a proxy that can try the owner.

The edge routes by the conversation id in the path, or by the partition in a
``Last-Event-ID`` cursor. Three requests that open a stream name neither: a
regenerate and a cursorless resume (``/v1/messages/{id}/…``: a message id says
nothing of its conversation) and ``POST /v1/chat/completions`` (its conversation
id is derived from the caller's user id, known only after auth). A proxy that
can send a request again after a response may send those to any gateway with
``X-Parley-Route: reroute``; a sharded gateway that finds, once it knows the
conversation, that its partition is another shard's answers **421 Misdirected
Request** with ``X-Parley-Partition`` before anything is appended, for the proxy
to send it on to that partition's owner (without the header). Parley's own edge
(HAProxy, edge/) cannot, so it removes the header: a request without it (through
the edge, a client straight at a gateway, a plain load balancer) is always
served, and the stream borrows the partition for a while (gateway/tokens.py).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.errors import ApiError
from gateway.services import Services

#: The request header by which the edge says it can send the request on to the owner.
ROUTE_HEADER = "x-parley-route"
#: The response header naming the conversation's chat.tokens partition.
PARTITION_HEADER = "X-Parley-Partition"


class Misdirected(ApiError):
    status, code = 421, "misdirected"

    def __init__(self, partition: int) -> None:
        super().__init__(f"chat.tokens partition {partition} belongs to another gateway; send the request there")
        self.partition = partition

    def response(self) -> JSONResponse:
        out = super().response()
        out.headers[PARTITION_HEADER] = str(self.partition)
        return out


def check(request: Request, svc: Services, conversation_id: str) -> None:
    """Misdirected when the edge may reroute and ``conversation_id``'s partition is not this gateway's."""
    shard = svc.tokens.shard
    if shard is None or request.headers.get(ROUTE_HEADER) != "reroute":
        return
    partition = svc.tokens.partition_of(conversation_id)
    if not shard.owns(partition):
        raise Misdirected(partition)
