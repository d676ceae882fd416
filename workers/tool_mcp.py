"""Tools on an MCP server, run as Parley tools: what a server offers, and the runner for one of its tools.

MCP (the Model Context Protocol, modelcontextprotocol.io) over Streamable HTTP, through the official Python
SDK (``mcp``, MIT). The client negotiates the version: ``server/discover`` with a 2026 server, the
``initialize`` handshake with an older one.

One session per call. Each ``run`` connects, negotiates, lists the server's tools, sends one ``tools/call``
and closes: two or three round trips more than a held session, for a runner with no state to lose (no
session that expires, no reconnecting after the server restarts, nothing shared between calls the executor
may hand to different owners). The listing comes before the call so that every failure it can meet happens
while nothing has been sent, and so the SDK holds the tool's output schema (it checks a structured result
against it, and would otherwise list the tools after the call, where a failure would lose the answer).

The call id travels as the idempotency key in the request's ``_meta``, under ``idempotency_key``. The spec
has no name for it (SEP-3182 proposed an ``idempotencyKey`` parameter; it was closed, not merged), and an
unprefixed ``_meta`` key is valid: only prefixes whose second label is ``modelcontextprotocol`` or ``mcp`` are
reserved. A plain, self-describing name is the one a tool's author finds, the same word as HttpTool's
``Idempotency-Key`` header. A server reads it as ``ctx.request_context.meta["idempotency_key"]`` (Python SDK)
or ``extra._meta.idempotency_key`` (TypeScript SDK).

What each ending means:

    the tool answered                               ok, or error when it set ``isError``
    the server refused the call (JSON-RPC -32601     error: the server's word that no tool ran
      or -32602: no such method, invalid params)
    the server lists no tool of that name           error, with nothing sent
    anything failing before the tools/call was      NotSent: refused, unreachable, a handshake or listing
      handed to the session                           that timed out or failed
    anything failing after                          OutcomeUnknown: the timeout, a dropped connection, an
                                                      answer that cannot be read, any other JSON-RPC error

Arguments and results are the user's: nothing here logs them, only the tool's name and an exception's
class. The SDK logs whole messages at DEBUG (``mcp.client.streamable_http``) and each request's URL at INFO
(``httpx2``): keep those loggers at WARNING where a log must carry no user data.

A server an organisation registered (parley/org_tools.py) is reached through the SSRF guard
(workers/net_guard.py: ``guard`` holds the operator's allowed networks): each request goes only to a globally
routable address, or one the operator allowed, pinned to the address checked. The operator's own servers
(the tools file) are reached as configured: the operator may run them on a private network.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from parley.errors import Unavailable
from workers.net_guard import GuardedTransport, Network, Refused
from workers.tool_runners import NotSent, OutcomeUnknown, ToolResult, clipped

log = logging.getLogger(__name__)

#: The ``_meta`` key that carries the call id (the module docstring says why this name).
IDEMPOTENCY_KEY: Final = "idempotency_key"

#: JSON-RPC errors that say the server refused the request, so no tool ran.
REFUSALS = frozenset({METHOD_NOT_FOUND, INVALID_PARAMS})

#: The most pages of tools/list read: a server whose cursor never ends cannot hold a call forever.
MAX_PAGES = 100


@dataclass(frozen=True)
class McpTool:
    """One tool a server lists. The hints are the server's own description of the tool and MCP says a client
    must not trust them (a server could call anything read-only): the operator's registry decides
    ``read_only`` and ``idempotent`` (parley/tool_registry.py), these only inform that choice."""

    name: str
    description: str
    input_schema: dict[str, Any]  # JSON Schema of the arguments, as the server wrote it
    read_only_hint: bool | None  # None: the server said nothing
    idempotent_hint: bool | None
    destructive_hint: bool | None


async def list_tools(url: str, timeout_s: float = 10, guard: Sequence[Network] | None = None) -> list[McpTool]:
    """The tools the MCP server at ``url`` lists. Raises ``Refused`` when the guard refuses its address
    (``guard``: the networks allowed besides global ones; None: unguarded), ``Unavailable`` when it cannot be
    asked or does not answer within ``timeout_s`` (connecting included)."""
    try:
        with anyio.fail_after(timeout_s):
            async with _client(url, guard) as client:
                tools = await _listing(client)
    except Exception as exc:
        if isinstance(_leaf(exc), Refused):
            raise _leaf(exc) from None
        raise Unavailable(f"the MCP server did not list its tools: {type(_leaf(exc)).__name__}") from exc
    return [_described(tool) for tool in tools]


class McpRunner:
    """Runs ``tool`` on the MCP server at ``url``: one session per call, ``timeout_s`` for all of it."""

    def __init__(self, url: str, tool: str, timeout_s: float = 30, guard: Sequence[Network] | None = None) -> None:
        self._url = url
        self._tool = tool
        self._timeout_s = timeout_s
        self._guard = guard  # an organisation's server: reached through the SSRF guard (None: the operator's)

    async def run(self, arguments: dict[str, Any], idempotency_key: str) -> ToolResult:
        sent = False
        answer: CallToolResult | None = None
        try:
            with anyio.fail_after(self._timeout_s):
                async with _client(self._url, self._guard) as client:
                    if not any(tool.name == self._tool for tool in await _listing(client)):
                        return ToolResult("error", "", f"the MCP server lists no tool named {self._tool!r}")
                    sent = True  # from here the call may reach the tool
                    answer = await client.call_tool(self._tool, arguments, meta={IDEMPOTENCY_KEY: idempotency_key})
        except Exception as exc:
            failure = _leaf(exc)
            name = type(failure).__name__  # never its message, which may quote the server or the request
            if answer is not None:  # only closing the session failed: the answer stands
                log.info("MCP tool %s answered; closing its session failed: %s", self._tool, name)
            elif not sent and isinstance(failure, Refused):  # the rule, never the address
                log.info("MCP tool %s not called: the guard refused its server", self._tool)
                return ToolResult("error", "", f"the MCP server's address is refused: {failure}")
            elif not sent:
                log.info("MCP tool %s not called: %s", self._tool, name)
                raise NotSent(name) from exc
            elif isinstance(failure, MCPError) and failure.code in REFUSALS:
                log.info("MCP tool %s refused: JSON-RPC %d", self._tool, failure.code)
                refused = f"the MCP server refused the call ({failure.code})"
                return ToolResult("error", clipped(failure.message), refused)
            else:
                log.warning("MCP tool %s outcome unknown: %s", self._tool, name)
                raise OutcomeUnknown(name) from exc
        assert answer is not None  # the block either set it or returned/raised
        if answer.is_error:
            return ToolResult("error", clipped(text_of(answer)), "the tool reported an error")
        return ToolResult("ok", clipped(text_of(answer)))


def text_of(result: CallToolResult) -> str:
    """The result as text: the text blocks in order, the others named (``[image: image/png]``,
    ``[resource: uri]``), and the structured content as JSON when no block carried text."""
    parts = list(_blocks(result.content))
    has_text = any(isinstance(b, TextContent) or _is_text_resource(b) for b in result.content)
    if not has_text and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _blocks(content: Iterable[Any]) -> Iterable[str]:
    for block in content:
        if isinstance(block, TextContent):
            yield block.text
        elif isinstance(block, ImageContent):
            yield f"[image: {block.mime_type}]"
        elif isinstance(block, AudioContent):
            yield f"[audio: {block.mime_type}]"
        elif isinstance(block, ResourceLink):
            yield f"[resource: {block.uri}]"
        elif isinstance(block, EmbeddedResource):
            inner = block.resource
            yield f"[resource: {inner.uri}]" + (f"\n{inner.text}" if isinstance(inner, TextResourceContents) else "")
        else:  # a kind of block newer than this code
            yield f"[{getattr(block, 'type', 'content')}]"


def _is_text_resource(block: Any) -> bool:
    return isinstance(block, EmbeddedResource) and not isinstance(block.resource, BlobResourceContents)


@asynccontextmanager
async def _client(url: str, guard: Sequence[Network] | None = None) -> AsyncIterator[Client]:
    # cache=None: each session is new, so a response cache could never be read back.
    if guard is None:
        async with Client(url, cache=None) as client:
            yield client
        return
    # The SDK's own timeouts (30 s, 300 s to read a stream), through the guard; the SDK leaves a client it
    # was handed open, so this block closes it.
    timeout = httpx2.Timeout(30, read=300)
    async with httpx2.AsyncClient(transport=GuardedTransport(guard), timeout=timeout, trust_env=False) as http:
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            yield client


async def _listing(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _described(tool: Tool) -> McpTool:
    hints = tool.annotations
    return McpTool(
        tool.name,
        tool.description or "",
        dict(tool.input_schema),
        hints.read_only_hint if hints else None,
        hints.idempotent_hint if hints else None,
        hints.destructive_hint if hints else None,
    )


def _leaf(exc: BaseException) -> BaseException:
    """What went wrong, out of the task groups the SDK's transport wraps it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
