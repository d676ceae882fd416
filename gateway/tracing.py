"""One trace id per HTTP request, and the response count by route: an ASGI middleware.

The trace id is a fresh one, followed by the caller's ``X-Request-ID`` when that
is a sane token (``<16 hex>-<caller's id>``): a caller's id finds its requests in
the logs, but cannot make one request's trace another's (two callers sending the
same id, or one forging another's, still get distinct traces); every event the request appends carries it (``trace_id`` on the
envelope) and so does every log line made while handling it (parley.logs).
The response says it back in ``X-Trace-Id``, so a user's bug report can name
it. Responses are counted by route template (never the raw path: ids would
make a series per conversation).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.logs import TRACE_ID
from parley.metrics import HTTP_REQUESTS

_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def trace_for(header: str | None) -> str:
    """A fresh id, with the caller's request id after it when that is a sane token (pure but for uuid4)."""
    if header and _SANE.match(header):
        return f"{uuid.uuid4().hex[:16]}-{header}"
    return uuid.uuid4().hex


def route_of(routes: Sequence[BaseRoute], scope: Scope) -> str:
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return getattr(route, "path", "other")
    return "other"


class TraceMiddleware:
    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"x-request-id")
        trace = trace_for(raw.decode("latin-1") if raw else None)
        scope.setdefault("state", {})["trace_id"] = trace
        token = TRACE_ID.set(trace)

        async def send_traced(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-trace-id", trace.encode())]
                HTTP_REQUESTS.labels(route_of(self.routes, scope), scope["method"], str(message["status"])).inc()
            await send(message)

        try:
            await self.app(scope, receive, send_traced)
        finally:
            TRACE_ID.reset(token)
