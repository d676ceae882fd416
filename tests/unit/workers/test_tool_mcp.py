"""The MCP runner (workers/tool_mcp.py) against a real MCP server: the SDK's own MCPServer (v2's name for
FastMCP), served over Streamable HTTP by uvicorn on a free local port in a thread of this process."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections import Counter
from collections.abc import Iterator

import httpx2
import pytest
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

from tests.fixtures.mcp_server import free_port, serving
from workers.net_guard import GuardedTransport, Refused
from workers.tool_mcp import IDEMPOTENCY_KEY, McpRunner, list_tools, text_of
from workers.tool_runners import MAX_RESULT_CHARS, NotSent, OutcomeUnknown

SECRET = "4111 1111 1111 1111"  # stands for the user's data, which no log line may carry


class Ledger:
    """The server's side: what each call carried."""

    def __init__(self) -> None:
        self.calls: Counter[str | None] = Counter()
        self.metas: list[dict[str, object]] = []


def mcp_server(ledger: Ledger) -> MCPServer:
    server = MCPServer("ledger", log_level="WARNING")

    @server.tool(
        description="Add an expense",
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False),
    )
    async def add_expense(amount: int, note: str, ctx: Context) -> str:
        meta = dict(ctx.request_context.meta or {})
        ledger.metas.append(meta)
        key = meta.get(IDEMPOTENCY_KEY)
        ledger.calls[key if isinstance(key, str) else None] += 1
        return f"added {amount} for {note}"

    @server.tool()
    async def locked() -> str:
        raise ToolError("the ledger is locked")

    @server.tool()
    async def strict() -> str:
        raise MCPError(INVALID_PARAMS, "amount must be positive")

    @server.tool()
    async def broken() -> str:
        raise MCPError(INTERNAL_ERROR, "the database went away")

    @server.tool()
    async def slow() -> str:
        await asyncio.sleep(3)
        return "too late"

    @server.tool()
    async def gallery() -> CallToolResult:
        return CallToolResult(
            content=[
                ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                ResourceLink(name="receipt", uri="file:///receipts/1.pdf"),
            ],
            structured_content={"images": 1},
        )

    return server


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Ledger]]:
    ledger = Ledger()
    with serving(mcp_server(ledger)) as url:
        yield url, ledger


async def test_the_listing_carries_each_schema_and_the_servers_hints(served: tuple[str, Ledger]) -> None:
    url, _ = served
    tools = {t.name: t for t in await list_tools(url)}
    assert {"add_expense", "locked", "strict", "broken", "slow", "gallery"} <= set(tools)
    add = tools["add_expense"]
    assert add.description == "Add an expense"
    assert add.input_schema["type"] == "object"
    assert set(add.input_schema["required"]) == {"amount", "note"}
    assert add.input_schema["properties"]["amount"]["type"] == "integer"
    assert (add.read_only_hint, add.idempotent_hint, add.destructive_hint) == (False, True, False)
    assert (tools["locked"].read_only_hint, tools["locked"].idempotent_hint) == (None, None)  # none given


async def test_a_call_returns_the_tools_text(served: tuple[str, Ledger]) -> None:
    url, _ = served
    result = await McpRunner(url, "add_expense").run({"amount": 12, "note": "lunch"}, "call-text")
    assert (result.outcome, result.text, result.error) == ("ok", "added 12 for lunch", "")


async def test_the_call_id_reaches_the_server_in_meta_as_the_idempotency_key(served: tuple[str, Ledger]) -> None:
    url, ledger = served
    runner = McpRunner(url, "add_expense")
    for key in ("call-a", "call-a", "call-b"):
        assert (await runner.run({"amount": 1, "note": "taxi"}, key)).outcome == "ok"
    assert (ledger.calls["call-a"], ledger.calls["call-b"]) == (2, 1)  # a server that honours it dedupes on it
    assert ledger.metas[-1][IDEMPOTENCY_KEY] == "call-b"


async def test_a_tool_that_fails_answers_error_with_its_text(served: tuple[str, Ledger]) -> None:
    url, _ = served
    result = await McpRunner(url, "locked").run({}, "call-locked")
    assert result.outcome == "error"
    assert "the ledger is locked" in result.text
    assert result.error == "the tool reported an error"  # the error names no output of the tool


async def test_a_call_the_server_refuses_is_an_error_not_an_unknown(served: tuple[str, Ledger]) -> None:
    url, _ = served
    result = await McpRunner(url, "strict").run({}, "call-strict")
    assert (result.outcome, result.text) == ("error", "amount must be positive")
    assert result.error == f"the MCP server refused the call ({INVALID_PARAMS})"


async def test_a_tool_the_server_does_not_list_is_an_error_and_is_never_called(served: tuple[str, Ledger]) -> None:
    url, _ = served
    result = await McpRunner(url, "delete_everything").run({}, "call-unlisted")
    assert (result.outcome, result.error) == ("error", "the MCP server lists no tool named 'delete_everything'")


async def test_other_protocol_errors_after_sending_leave_the_outcome_unknown(served: tuple[str, Ledger]) -> None:
    url, _ = served
    with pytest.raises(OutcomeUnknown, match="MCPError"):
        await McpRunner(url, "broken").run({}, "call-broken")


async def test_blocks_other_than_text_are_named_and_structured_content_stands_in(served: tuple[str, Ledger]) -> None:
    url, _ = served
    result = await McpRunner(url, "gallery").run({}, "call-gallery")
    named = '[image: image/png]\n[resource: file:///receipts/1.pdf]\n{"images": 1}'
    assert (result.outcome, result.text) == ("ok", named)


def test_structured_content_is_left_out_when_a_block_carries_text_and_resources_keep_theirs() -> None:
    text = CallToolResult(content=[TextContent(text="3 rows")], structured_content={"rows": 3})
    assert text_of(text) == "3 rows"
    embedded = CallToolResult(
        content=[
            EmbeddedResource(resource=TextResourceContents(uri="mem://a", text="alpha")),
            EmbeddedResource(resource=BlobResourceContents(uri="mem://b", blob="AAEC")),
        ],
        structured_content={"n": 2},
    )
    assert text_of(embedded) == "[resource: mem://a]\nalpha\n[resource: mem://b]"
    assert text_of(CallToolResult(content=[])) == ""


async def test_a_long_answer_is_clipped(served: tuple[str, Ledger]) -> None:
    url, _ = served
    result = await McpRunner(url, "add_expense").run({"amount": 1, "note": "x" * (MAX_RESULT_CHARS + 10)}, "call-long")
    assert len(result.text) < MAX_RESULT_CHARS + 100
    assert result.text.endswith("[cut: the tool's answer was longer]")


async def test_a_refused_port_is_not_sent() -> None:
    with pytest.raises(NotSent, match="ConnectError"):
        await McpRunner(f"http://127.0.0.1:{free_port()}/mcp", "add_expense", timeout_s=5).run({}, "call-refused")


async def test_a_server_that_never_answers_the_handshake_is_not_sent() -> None:
    """TCP accepts (the kernel's backlog) but no MCP answer comes: the tools/call never left."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        with pytest.raises(NotSent, match="TimeoutError"):
            await McpRunner(url, "add_expense", timeout_s=0.3).run({}, "call-silent")


async def test_a_tool_slower_than_the_timeout_leaves_the_outcome_unknown(served: tuple[str, Ledger]) -> None:
    url, _ = served
    began = time.monotonic()
    with pytest.raises(OutcomeUnknown, match="TimeoutError"):
        await McpRunner(url, "slow", timeout_s=0.5).run({}, "call-slow")
    assert time.monotonic() - began < 2


async def test_the_runner_logs_neither_arguments_nor_results(
    served: tuple[str, Ledger], caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = served
    caplog.set_level(logging.DEBUG, logger="workers.tool_mcp")
    await McpRunner(url, "add_expense").run({"amount": 5, "note": SECRET}, "call-private")
    await McpRunner(url, "strict").run({"note": SECRET}, "call-private-2")
    with pytest.raises(OutcomeUnknown):
        await McpRunner(url, "slow", timeout_s=0.3).run({"note": SECRET}, "call-private-3")
    ours = [r for r in caplog.records if r.name == "workers.tool_mcp"]
    assert ours and not any(SECRET in r.getMessage() for r in ours)


# ------------------------------------------------------------------ an organisation's server: the SSRF guard

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


async def test_a_guarded_listing_of_a_loopback_server_is_refused_before_anything_is_sent(served: tuple[str, Ledger]) -> None:
    url, _ = served
    with pytest.raises(Refused, match="loopback"):
        await list_tools(url, guard=())
    with pytest.raises(Refused, match="private network"):
        await list_tools("http://10.1.2.3/mcp", guard=(), timeout_s=5)
    with pytest.raises(Refused, match="link-local"):  # the cloud's metadata endpoint
        await list_tools("http://169.254.169.254/mcp", guard=(), timeout_s=5)


async def test_a_guarded_call_to_a_refused_address_is_an_error_that_never_reached_the_tool(served: tuple[str, Ledger]) -> None:
    url, ledger = served
    result = await McpRunner(url, "add_expense", guard=()).run({"amount": 1, "note": "x"}, "call-guarded")
    assert (result.outcome, result.error) == ("error", "the MCP server's address is refused: the address is loopback")
    assert ledger.calls["call-guarded"] == 0


async def test_the_operators_allowance_opens_a_network_and_the_connection_is_pinned_to_the_checked_address(
    served: tuple[str, Ledger],
) -> None:
    url, ledger = served
    assert "add_expense" in {t.name for t in await list_tools(url, guard=LOOPBACK)}
    result = await McpRunner(url, "add_expense", guard=LOOPBACK).run({"amount": 2, "note": "bus"}, "call-allowed")
    assert (result.outcome, result.text) == ("ok", "added 2 for bus")
    # By name: the transport resolves it once, checks it and connects to that address (Host: the name).
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    http = httpx2.AsyncClient(transport=GuardedTransport(LOOPBACK, resolve))
    async with http:
        response = await http.post(url.replace("127.0.0.1", "mcp.example.test"), json={})
    assert asked and set(asked) == {"mcp.example.test"}
    # The server at 127.0.0.1 got the request with Host: the name, which the SDK's own DNS-rebinding
    # protection refuses for a server bound to localhost: the connection went to the address, the name travelled.
    assert response.status_code == 421

    async def rebinding(host: str, port: int) -> list[str]:
        return ["127.0.0.1", "10.0.0.7"]  # one private answer refuses the name

    async with httpx2.AsyncClient(transport=GuardedTransport(LOOPBACK, rebinding)) as http:
        with pytest.raises(Refused, match="private network"):
            await http.post(url.replace("127.0.0.1", "mcp.example.test"), json={})
