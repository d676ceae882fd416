"""Registering an organisation's MCP server (workers/org_mcp.py), the one procedure behind POST /v1/org/tools
and ``parley tools add --org``: each refusal names its reason and keeps nothing; a real MCP server of the
SDK's own answers the listing."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from parley.org_tools import MAX_SERVERS, Server
from tests.fixtures.mcp_server import echoing, serving
from workers.org_mcp import NotRegistered, register

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


class Kept:
    """The organisation's servers, in memory (the store's two calls the registration makes)."""

    def __init__(self, servers: list[Server] | None = None) -> None:
        self.servers_: list[Server] = servers or []

    async def servers(self, org_id: str) -> list[Server]:
        return list(self.servers_)

    async def put(self, org_id: str, server: Server) -> Server:
        self.servers_ = [s for s in self.servers_ if s.name != server.name] + [server]
        return server


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(echoing("ledger", "add", "Adds an expense")) as at:
        yield at


async def test_a_server_is_kept_with_its_tools_under_its_name(url: str) -> None:
    store = Kept()
    server = await register(store, "acme", "ledger", url, operator_tools={"fetch_url"}, allow_networks=LOOPBACK)  # type: ignore[arg-type]
    assert [t.name for t in server.tools] == ["ledger_add"] and store.servers_ == [server]
    again = await register(store, "acme", "ledger", url, operator_tools=(), allow_networks=LOOPBACK)  # type: ignore[arg-type]
    assert store.servers_ == [again]  # the same name replaces it


@pytest.mark.parametrize(
    ("name", "at", "allow", "operator", "code", "conflict"),
    [
        ("bad name!", "", LOOPBACK, (), "invalid_name", False),
        ("ledger", "file:///etc/passwd", LOOPBACK, (), "invalid_url", False),
        ("ledger", "", (), (), "address_refused", False),  # loopback, not opened by the operator
        ("ledger", "http://127.0.0.1:9/mcp", LOOPBACK, (), "server_unreachable", False),
        ("ledger", "", LOOPBACK, ("ledger_add",), "tool_name_taken", True),
    ],
)
async def test_each_refusal_names_its_reason_and_keeps_nothing(
    url: str, name: str, at: str, allow: tuple[ipaddress.IPv4Network, ...], operator: tuple[str, ...], code: str, conflict: bool
) -> None:
    store = Kept()
    with pytest.raises(NotRegistered) as refused:
        await register(store, "acme", name, at or url, operator_tools=operator, allow_networks=allow, timeout_s=5)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.conflict) == (code, conflict) and store.servers_ == []


async def test_past_the_server_limit_a_new_name_is_refused_and_a_kept_one_replaced(url: str) -> None:
    full = [Server(f"s{i}", url, ()) for i in range(MAX_SERVERS)]
    store = Kept(full)
    with pytest.raises(NotRegistered) as refused:
        await register(store, "acme", "ledger", url, operator_tools=(), allow_networks=LOOPBACK)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.conflict) == ("too_many_servers", True) and store.servers_ == full
    await register(store, "acme", "s0", url, operator_tools=(), allow_networks=LOOPBACK)  # type: ignore[arg-type]
    assert len(store.servers_) == MAX_SERVERS
