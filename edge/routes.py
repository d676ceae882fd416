"""Which gateway a request goes to (pure): the owner of its conversation's partition, else any.

- ``/v1/conversations/{id}`` and everything under it: the owner of
  ``partition_for(id)`` (its streams, and its reads too, which then find the
  owner's memory of the conversation warm: gateway/recent.py).
- ``GET /v1/messages/{id}/stream`` with a cursor (``Last-Event-ID`` or
  ``?last_event_id=``): the owner of the cursor's partition — the cursor *is*
  ``partition:offset``.
- Anything else goes round-robin. Those that turn out to open a stream (a
  regenerate, a cursorless resume, ``/v1/chat/completions``) are sent with
  ``X-Parley-Route: reroute``, and a gateway that is not the owner answers 421
  naming the partition (gateway/ownership.py).

The owner is tried first, then the gateways after it in ring order, those the
health checks last saw up before the others: one fallback takes a down owner's
whole share, so its partitions are borrowed by one gateway, not by all of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

from parley.partitioning import partition_for
from parley.shards import owner

_CONVERSATION = re.compile(r"/v1/conversations/([^/]+)(?:/.*)?")
_STREAM = re.compile(r"/v1/messages/[^/]+/stream")
_CURSOR = re.compile(r"([0-9]{1,9}):(?:-1|[0-9]{1,18})")


@dataclass(frozen=True)
class Route:
    """Where a request should go: ``partition``'s owner, or (None) any gateway."""

    partition: int | None
    how: str  # owner | cursor | any (the parley_edge_routes label)


def route(target: str, last_event_id: str | None, partitions: int) -> Route:
    """The route of a request for ``target`` (path and query, as on the request line)."""
    path, _, query = target.partition("?")
    found = _CONVERSATION.fullmatch(path)
    if found is not None:
        return Route(partition_for(unquote(found[1]), partitions), "owner")
    if _STREAM.fullmatch(path):
        cursor = last_event_id or (parse_qs(query).get("last_event_id") or [None])[0]
        partition = cursor_partition(cursor, partitions)
        if partition is not None:
            return Route(partition, "cursor")
    return Route(None, "any")


def cursor_partition(cursor: str | None, partitions: int) -> int | None:
    """The partition a ``partition:offset`` cursor names; None for anything else (the gateway judges it)."""
    if not cursor:
        return None
    found = _CURSOR.fullmatch(cursor.strip())
    if found is None or int(found[1]) >= partitions:
        return None
    return int(found[1])


def order(partition: int | None, up: Sequence[bool], start: int) -> list[int]:
    """Gateways to try, best first: ``partition``'s owner (else gateway ``start``, round-robin) and the
    ring after it; those last seen up before those last seen down (they may be back)."""
    n = len(up)
    first = owner(partition, n) if partition is not None else start % n
    ring = [(first + k) % n for k in range(n)]
    return [g for g in ring if up[g]] + [g for g in ring if not up[g]]
