"""`POST /v1/telemetry`: what the client measured, recorded apart from the server's own figures.

A proxy or a slow network hides what the user waits for; the web page sends
the time from its send to the first token it drew (``ttft_ms``) and it lands
in ``parley_client_ttft_seconds``, next to the gateway's and the worker's TTFT.
Only numbers are accepted; the client label is one of a fixed set, so a
caller cannot create series at will.
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import Unprocessable
from gateway.services import services
from gateway.validation import MISSING, json_body, string
from parley.metrics import CLIENT_TTFT

#: Labels a client may give itself; anything else is counted as "other".
CLIENTS = frozenset({"web", "cli", "api"})
#: The longest `client` accepted (as the OpenAPI document says).
MAX_CLIENT_CHARS = 20
#: A first token later than this is a broken measurement (a tab left in the background), not a latency.
MAX_TTFT_MS = 600_000.0


def ttft_seconds(value: object) -> float:
    """The reported TTFT in seconds, or Unprocessable (pure)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unprocessable("`ttft_ms` must be a number of milliseconds")
    if not 0 <= value <= MAX_TTFT_MS:
        raise Unprocessable(f"`ttft_ms` must be between 0 and {MAX_TTFT_MS:.0f}")
    return float(value) / 1000.0


async def post_telemetry(request: Request) -> Response:
    svc = services(request)
    await svc.auth(request)  # only users' clients report: an open endpoint would let anyone skew the figures
    body = await json_body(request, 4096)
    seconds = ttft_seconds(body.get("ttft_ms"))
    if body.get("client", "web") is None:
        raise Unprocessable("`client` must be a string")
    client = string(body, "client", max_chars=MAX_CLIENT_CHARS, required=False)
    label = "web" if client is MISSING else (client if client in CLIENTS else "other")
    CLIENT_TTFT.labels(label).observe(seconds)
    return Response(status_code=204)
