"""Every response carries the security headers; HSTS only when configured; a handler's own header wins."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.security_headers import CONTENT_SECURITY_POLICY, SecurityHeadersMiddleware


async def page(request: Request) -> Response:
    return PlainTextResponse("<p>hi</p>", media_type="text/html")


async def own_policy(request: Request) -> Response:
    return JSONResponse({}, headers={"Referrer-Policy": "no-referrer"})


def client(hsts_s: int = 0) -> TestClient:
    app = Starlette(
        routes=[Route("/", page), Route("/own", own_policy)],
        middleware=[Middleware(SecurityHeadersMiddleware, hsts_s=hsts_s)],
    )
    return TestClient(app)


def test_every_response_has_the_headers_even_a_404() -> None:
    with client() as http:
        for path in ("/", "/nowhere"):
            r = http.get(path)
            assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["referrer-policy"] == "same-origin"
            assert "strict-transport-security" not in r.headers


def test_the_policy_allows_no_inline_script_and_no_framing() -> None:
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["script-src"] == "'self'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'" and directives["base-uri"] == "'none'"
    assert directives["default-src"] == "'self'" and directives["form-action"] == "'self'"


def test_hsts_only_when_configured() -> None:
    with client(hsts_s=31536000) as http:
        assert http.get("/").headers["strict-transport-security"] == "max-age=31536000"


def test_a_handlers_own_header_is_kept() -> None:
    with client() as http:
        r = http.get("/own")
        assert r.headers.get_list("referrer-policy") == ["no-referrer"]
