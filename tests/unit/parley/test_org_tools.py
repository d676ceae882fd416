"""What an organisation's MCP server may bring (parley/org_tools.py checked): the listing is checked whole
before anything is kept, since its schemas reach the broker's validator and its descriptions the model."""

from __future__ import annotations

import pytest

from parley.errors import ConfigError
from parley.org_tools import MAX_DESCRIPTION_CHARS, MAX_TOOLS, Listed, checked, local_name

OBJECT = {"type": "object", "properties": {"n": {"type": "integer"}}}


def test_each_tool_is_kept_as_server_underscore_tool_never_read_only_or_idempotent_and_guarded() -> None:
    server = checked("ledger", "https://mcp.acme.example/mcp", [Listed("add.row", "Add " + "x" * 5000, OBJECT)])
    [tool] = server.tools
    assert (tool.name, tool.remote, tool.kind, tool.url) == ("ledger_add_row", "add.row", "mcp", "https://mcp.acme.example/mcp")
    assert (tool.read_only, tool.idempotent, tool.guarded) == (False, False, True)
    assert len(tool.description) == MAX_DESCRIPTION_CHARS
    assert local_name("s" * 32, "t" * 64) == ("s" * 32 + "_" + "t" * 64)[:64]


@pytest.mark.parametrize(
    ("server", "listed", "problem"),
    [
        ("bad name!", [Listed("a", "", OBJECT)], "server's name"),
        ("ledger", [], "lists no tools"),
        ("ledger", [Listed(f"t{i}", "", OBJECT) for i in range(MAX_TOOLS + 1)], f"at most {MAX_TOOLS}"),
        ("ledger", [Listed("a.b", "", OBJECT), Listed("a_b", "", OBJECT)], "both be named 'ledger_a_b'"),
        ("ledger", [Listed("a", "", {"type": "string"})], "not of type object"),
        ("ledger", [Listed("a", "", {"type": "object", "properties": {"n": {"type": 7}}})], "not valid JSON Schema"),
        ("ledger", [Listed("a", "", {"type": "object", "properties": {"n": {"$ref": "https://evil.example/s.json"}}})], "refers outside"),
        ("ledger", [Listed("a", "", {"type": "object", "description": "x" * 20_000})], "longer than"),
    ],
)
def test_a_listing_parley_will_not_carry_is_refused_naming_the_problem(server: str, listed: list[Listed], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        checked(server, "https://mcp.acme.example/mcp", listed)


def test_local_references_are_taken() -> None:
    schema = {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}}}
    assert checked("ledger", "https://x.example/mcp", [Listed("a", "", schema)]).tools[0].parameters == schema
