"""Which address a request comes from (gateway/client_address.py): a direct client's X-Forwarded-For is
ignored; from a trusted proxy, the right-most address it did not add itself counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

import gateway.__main__ as gateway_main
from gateway.app import create_app
from gateway.client_address import limit_key, middleware, trusted_proxies
from gateway.settings import GatewaySettings
from parley.errors import ConfigError
from parley.settings import CassandraSettings, KafkaSettings

EDGE = "10.0.0.5"
TRUSTED = trusted_proxies(f"{EDGE},192.168.0.0/16,::1")


async def seen(request: Request) -> JSONResponse:
    assert request.client is not None
    return JSONResponse({"client": request.client.host, "scheme": request.url.scheme})


def seen_from(peer: str, headers: dict[str, str] | None = None, trusted: tuple[str, ...] = TRUSTED) -> dict[str, str]:
    app = Starlette(routes=[Route("/", seen)], middleware=[middleware(trusted)])
    with TestClient(app, client=(peer, 40000)) as http:
        return http.get("/", headers=headers or {}).json()


def test_a_direct_clients_forwarded_headers_are_ignored() -> None:
    got = seen_from("203.0.113.9", {"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https"})
    assert got == {"client": "203.0.113.9", "scheme": "http"}


def test_from_the_edge_the_address_it_appended_counts_not_the_clients_claim() -> None:
    # The client sent "X-Forwarded-For: 6.6.6.6, 1.2.3.4"; the edge appended the peer it saw.
    got = seen_from(EDGE, {"X-Forwarded-For": "6.6.6.6, 1.2.3.4, 198.51.100.7", "X-Forwarded-Proto": "https"})
    assert got == {"client": "198.51.100.7", "scheme": "https"}
    # An edge that replaces the header with its own view (HAProxy's set-header) leaves just that one.
    assert seen_from(EDGE, {"X-Forwarded-For": "198.51.100.7"})["client"] == "198.51.100.7"


def test_behind_two_trusted_proxies_the_outer_ones_view_counts() -> None:
    # A TLS terminator at 192.168.1.1 appended the client; the edge appended the terminator.
    got = seen_from(EDGE, {"X-Forwarded-For": "6.6.6.6, 198.51.100.7, 192.168.1.1"})
    assert got["client"] == "198.51.100.7"


def test_a_trusted_peer_without_the_header_is_the_client() -> None:
    assert seen_from(EDGE)["client"] == EDGE


def test_nobody_is_trusted_when_the_setting_is_empty() -> None:
    assert seen_from(EDGE, {"X-Forwarded-For": "198.51.100.7"}, trusted=())["client"] == EDGE


def test_the_default_trusts_the_edge_on_this_host_only() -> None:
    proxies = GatewaySettings().proxies
    assert proxies == ("127.0.0.1/32", "::1/128")
    assert seen_from("127.0.0.1", {"X-Forwarded-For": "198.51.100.7"}, proxies)["client"] == "198.51.100.7"
    assert seen_from("127.0.0.2", {"X-Forwarded-For": "198.51.100.7"}, proxies)["client"] == "127.0.0.2"


@pytest.mark.parametrize("value", ["*", "10.0.0.300", "edge.internal", "10.0.0.0/33"])
def test_a_setting_that_is_not_addresses_is_refused_by_name(value: str) -> None:
    with pytest.raises(ConfigError, match="PARLEY_GATEWAY_TRUSTED_PROXIES"):
        GatewaySettings(trusted_proxies=value)


def test_limits_count_an_ipv6_host_by_its_slash_64() -> None:
    assert limit_key("2001:db8::1") == limit_key("2001:db8::ffff:1") == "2001:db8::/64"
    assert limit_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert limit_key("192.0.2.1") == "192.0.2.1"
    assert limit_key("unknown") == "unknown"


def test_the_gateway_applies_the_rule_with_its_setting_and_uvicorns_own_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = GatewaySettings(trusted_proxies="10.0.0.5")
    app = create_app(settings, KafkaSettings(), CassandraSettings())
    outermost = app.user_middleware[0]
    assert outermost.cls is ProxyHeadersMiddleware and outermost.kwargs == {"trusted_hosts": ["10.0.0.5/32"]}
    # uvicorn's own copy (FORWARDED_ALLOW_IPS, 127.0.0.1 by default) would trust the host whatever the setting.
    configs: list[uvicorn.Config] = []
    monkeypatch.setattr(gateway_main, "setup_logging", lambda name: None)
    monkeypatch.setattr(gateway_main, "gc", SimpleNamespace(freeze=lambda: None, set_threshold=lambda *a: None))
    monkeypatch.setattr(gateway_main.DrainingServer, "run", lambda self: configs.append(self.config))
    gateway_main.serve(settings)
    assert [c.proxy_headers for c in configs] == [False]
