"""`parley tools`: the operator's tools file (PARLEY_TOOLS_FILE, parley/tool_registry.py).

    parley tools list                      # every tool the gateway may offer, with how it runs
    parley tools add NAME URL [--file F]   # every tool of the MCP server at URL, as NAME_<tool>
    parley tools add NAME URL --org ORG    # the same, for one organisation's members (as POST /v1/org/tools)

``add`` asks the server for its tools (streamable HTTP, the official ``mcp`` SDK) and writes each into the
file with its JSON Schema, never read-only and never idempotent: a server's annotations are hints (the MCP
spec says so), shown here for the operator to decide, and only the operator's word changes what the
permission broker allows. The file is checked whole before it is replaced; a name already there is refused.
The services read the file at start: restart the gateway, the broker and the executor after a change.

With ``--org`` the server is the organisation's (parley/org_tools.py, as its admin registers one): kept in
Cassandra, offered to its members alone, in force within seconds without a restart, and reached through the
SSRF guard with the file's ``fetch.allow_networks``, here as at every call.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from parley import tool_registry
from parley.errors import ConfigError
from parley.settings import from_env

app = typer.Typer(help="The tools Parley runs (PARLEY_TOOLS_FILE): list them, add an MCP server's.")
console = Console()


def _file(path: str | None) -> Path:
    chosen = path or from_env(tool_registry.ToolSettings).tools_file
    if not chosen:
        raise typer.BadParameter("name the file: --file PATH, or set PARLEY_TOOLS_FILE")
    return Path(chosen)


@app.command("list")
def list_tools(file: str = typer.Option(None, "--file", help="the tools file (default: PARLEY_TOOLS_FILE)")) -> None:
    """Every tool a turn may offer, how it runs, and what the operator declared of it."""
    path = file or from_env(tool_registry.ToolSettings).tools_file
    config = tool_registry.load(path or None)
    table = Table("name", "kind", "where", "read-only", "idempotent")
    for spec in config.tools.values():
        where = spec.url + (f" ({spec.remote})" if spec.remote else "")
        table.add_row(spec.name, spec.kind, where or "built in", "yes" if spec.read_only else "no", "yes" if spec.idempotent else "no")
    console.print(table)
    console.print(f"mode {config.mode}; {len(config.rules)} rules; at most {config.max_rounds} rounds a turn")


@app.command("add")
def add(
    name: str = typer.Argument(..., help="prefix of the tools' names in Parley (letters, digits, _ and -)"),
    url: str = typer.Argument(..., help="the MCP server's streamable-HTTP endpoint"),
    file: str = typer.Option(None, "--file", help="the tools file (default: PARLEY_TOOLS_FILE)"),
    org: str = typer.Option(None, "--org", help="an organisation's id: the server is its members' alone (not the file's)"),
) -> None:
    """Add every tool of the MCP server at URL to the tools file, as NAME_<tool>; or, with --org, to the
    organisation's own tools."""
    from workers.tool_mcp import list_tools as listed  # the SDK only here: the CLI's other commands never load it

    if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", name):
        raise typer.BadParameter("NAME is 1 to 32 letters, digits, _ or -")
    if org:
        asyncio.run(_add_for_org(org, name, url, file))
        return
    path = _file(file)
    raw = json.loads(path.read_text()) if path.exists() else {}
    tools = asyncio.run(listed(url))
    entries = raw.setdefault("tools", [])
    for tool in tools:
        local = re.sub(r"[^A-Za-z0-9_-]", "_", f"{name}_{tool.name}")[:64]
        entries.append(
            {
                "name": local, "kind": "mcp", "url": url, "remote": tool.name, "description": tool.description,
                "parameters": tool.input_schema or {"type": "object"}, "read_only": False, "idempotent": False,
            }
        )  # fmt: skip
        hints = {k: v for k, v in (("read-only", tool.read_only_hint), ("idempotent", tool.idempotent_hint),
                                   ("destructive", tool.destructive_hint)) if v is not None}  # fmt: skip
        console.print(f"{local}: {tool.name} at {url}" + (f" (the server's hints: {hints}; not trusted)" if hints else ""))
    try:
        tool_registry.parse(raw)  # the whole file, as every service will read it
    except ConfigError as exc:
        raise typer.BadParameter(f"the file would not load: {exc}") from None
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(raw, indent=2) + "\n")
    os.replace(staged, path)
    console.print(f"{len(tools)} tools added to {path}; restart the gateway, the tool broker and the executor")


async def _add_for_org(org_id: str, name: str, url: str, file: str | None) -> None:
    from parley.cassandra import AsyncCql
    from parley.org_tools import OrgTools
    from parley.settings import CassandraSettings
    from workers.org_mcp import NotRegistered, register

    config = tool_registry.load(file or from_env(tool_registry.ToolSettings).tools_file or None)
    cql = AsyncCql(from_env(CassandraSettings))
    if not await cql.run("SELECT org_id FROM {ks}.orgs WHERE org_id = ?", (org_id,)):
        raise typer.BadParameter(f"no organisation {org_id!r}")
    try:
        server = await register(OrgTools(cql), org_id, name, url, operator_tools=config.tools, allow_networks=config.allow_networks)
    except NotRegistered as exc:
        raise typer.BadParameter(str(exc)) from None
    for tool in server.tools:
        console.print(f"{tool.name}: {tool.remote} at {url}")
    console.print(f"{len(server.tools)} tools of {org_id}'s; its members may offer them now (asked unless a rule says otherwise)")
