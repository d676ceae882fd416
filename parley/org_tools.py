"""The MCP servers an organisation's admin registered for its members (DESIGN.md §13; table ``org_tools``).

An admin adds a server by name and URL (``POST /v1/org/tools``, ``parley tools add NAME URL --org ORG``):
Parley asks the server for its tools, through the SSRF guard (workers/net_guard.py), and keeps each one as
``<server>_<tool>`` with its JSON Schema. Such a tool is offered to that organisation's members alone, and
it is never read-only or idempotent, whatever the server's annotations say: only the operator's word makes a
tool read-only, so with no rule a call of it is asked. The operator's tools come first everywhere: a name
the tools file holds is refused at registration, and if the operator adds it later, the operator's wins.

A server is one row (its tools as JSON), so a registration is one write and no reader sees half of it.
What a server lists is checked here before it is kept, since its schemas reach the broker's validator and
its descriptions reach the model: at most ``MAX_TOOLS`` tools, names Parley can carry, object schemas that
are valid JSON Schema, no more than ``MAX_SCHEMA_BYTES`` each, and no ``$ref`` beyond the schema itself (a
remote reference would make the validator fetch a URL of the server's choosing).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import jsonschema

from parley.errors import ConfigError
from parley.tool_registry import ToolSpec

if TYPE_CHECKING:  # handed in: the registration (workers/org_mcp.py) loads no database client
    from parley.cassandra import AsyncCql

log = logging.getLogger(__name__)

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
#: Servers one organisation may register, and tools one server may bring.
MAX_SERVERS = 16
MAX_TOOLS = 64
MAX_SCHEMA_BYTES = 16 * 1024
MAX_DESCRIPTION_CHARS = 1024
#: What a call of an organisation's tool may take, the MCP session included.
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Listed:
    """A tool as its server lists it (workers/tool_mcp.py ``McpTool`` carries the same and the hints)."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class Server:
    name: str
    url: str
    tools: tuple[ToolSpec, ...]
    added_at: datetime | None = None

    def public(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "added_at": self.added_at.isoformat() if self.added_at else None,
            "tools": [
                {"name": t.name, "remote": t.remote, "description": t.description, "parameters": dict(t.parameters)}
                for t in self.tools
            ],
        }


def local_name(server: str, tool: str) -> str:
    """The name a member offers and the model calls: ``<server>_<tool>``, in the characters a tool name allows."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}_{tool}")[:64]


def checked(server: str, url: str, listed: Iterable[Listed]) -> Server:
    """``listed`` as the organisation's tools of ``server``; ConfigError naming the first problem."""
    if not SERVER_NAME.fullmatch(server):
        raise ConfigError("the server's name is 1 to 32 letters, digits, _ or -")
    tools = list(listed)
    if not tools:
        raise ConfigError("the server lists no tools")
    if len(tools) > MAX_TOOLS:
        raise ConfigError(f"the server lists {len(tools)} tools; at most {MAX_TOOLS} are taken")
    specs: dict[str, ToolSpec] = {}
    for tool in tools:
        name = local_name(server, tool.name)
        if name in specs:
            raise ConfigError(f"two of the server's tools would both be named {name!r}")
        specs[name] = ToolSpec(
            name,
            tool.description[:MAX_DESCRIPTION_CHARS],
            _schema(name, tool.parameters),
            "mcp",
            url,
            tool.name,
            read_only=False,
            idempotent=False,
            timeout_s=TIMEOUT_S,
            guarded=True,
        )
    return Server(server, url, tuple(specs.values()))


def _schema(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    schema = dict(parameters or {"type": "object"})
    if schema.get("type") != "object":
        raise ConfigError(f"{name}: its arguments' schema is not of type object")
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise ConfigError(f"{name}: its arguments' schema is longer than {MAX_SCHEMA_BYTES} bytes")
    for ref in _refs(schema):
        if not ref.startswith("#"):
            raise ConfigError(f"{name}: its schema refers outside itself ($ref); only local references are taken")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{name}: its arguments' schema is not valid JSON Schema ({exc.validator})") from None
    return schema


def _refs(value: Any) -> Iterable[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if key in ("$ref", "$dynamicRef"):
                    yield inner if isinstance(inner, str) else ""
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)


def _tools_json(server: Server) -> str:
    return json.dumps(server.public()["tools"])  # what _server reads back


def _server(row: Any) -> Server | None:
    try:
        entries = json.loads(row.tools)
        tools = tuple(
            ToolSpec(e["name"], e["description"], e["parameters"], "mcp", row.url, e["remote"], timeout_s=TIMEOUT_S, guarded=True)
            for e in entries
        )
    except (ValueError, TypeError, KeyError):  # written only by this module: a row it cannot read is skipped, said once
        log.warning("an organisation's MCP server row does not parse; its tools are not offered", extra={"server": row.server})
        return None
    return Server(row.server, row.url, tools, row.added_at)


class OrgTools:
    """The table, for the gateway, the broker, the executor and the CLI."""

    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    async def servers(self, org_id: str) -> list[Server]:
        rows = await self._cql.run("SELECT server, url, tools, added_at FROM {ks}.org_tools WHERE org_id = ?", (org_id,))
        return [s for s in map(_server, rows) if s is not None]

    async def specs(self, org_id: str) -> dict[str, ToolSpec]:
        """Every tool of the organisation's servers, by the name a member offers."""
        return {t.name: t for server in await self.servers(org_id) for t in server.tools}

    async def spec(self, org_id: str, name: str) -> ToolSpec | None:
        return (await self.specs(org_id)).get(name) if org_id else None

    async def put(self, org_id: str, server: Server) -> Server:
        at = datetime.now(timezone.utc)
        await self._cql.run(
            "INSERT INTO {ks}.org_tools (org_id, server, url, tools, added_at) VALUES (?, ?, ?, ?, ?)",
            (org_id, server.name, server.url, _tools_json(server), at),
        )
        return Server(server.name, server.url, server.tools, at)

    async def remove(self, org_id: str, server: str) -> None:
        await self._cql.run("DELETE FROM {ks}.org_tools WHERE org_id = ? AND server = ?", (org_id, server))
