"""Security headers on every gateway response: an ASGI middleware (docs/web-sign-in.md).

The page (gateway/static/) is ES modules and one stylesheet from the gateway's own origin, with no inline
script, style or style attribute, so its Content-Security-Policy allows 'self' and nothing else: an
injected ``<script>`` or ``onclick=`` does not run, and nothing is sent to or loaded from another origin.
JSON and SSE responses carry the same headers (a browser may be pointed at them directly).

``Referrer-Policy: same-origin``: links out of a reply carry no Referer at all (as ``no-referrer``), while
the page's own requests keep a real ``Origin`` header, which the CSRF check of cookie sessions reads;
under ``no-referrer`` the browser sends ``Origin: null`` on same-origin POSTs. HSTS is sent only when
PARLEY_GATEWAY_HSTS_S says clients reach Parley over HTTPS (a plain-HTTP dev setup would be pinned).
A header a handler set itself is left as it is.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ]
)


def security_headers(hsts_s: int) -> list[tuple[bytes, bytes]]:
    """The headers every response gets; HSTS only with a positive max-age."""
    headers = [
        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"referrer-policy", b"same-origin"),
    ]
    if hsts_s > 0:
        headers.append((b"strict-transport-security", f"max-age={hsts_s}".encode()))
    return headers


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp, hsts_s: int = 0) -> None:
        self.app = app
        self.headers = security_headers(hsts_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in self.headers if name not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)
