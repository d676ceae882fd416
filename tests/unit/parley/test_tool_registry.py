"""The operator's tools file (parley/tool_registry.py): what it takes, and a bad file refused whole, by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parley.errors import ConfigError
from parley.tool_registry import FETCH_URL, load, parse

TOOL = {"name": "add_expense", "url": "https://expenses.example/add", "idempotent": True,
        "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}


def test_without_a_file_only_the_read_only_fetch_is_there() -> None:
    config = load(None)
    assert list(config.tools) == [FETCH_URL] and config.tools[FETCH_URL].read_only
    assert config.mode == "rules" and config.allow_networks == ()


def test_a_file_adds_http_tools_rules_and_the_fetch_allowance(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [TOOL], "rules": [{"name": "r", "effect": "allow", "tool": "add_expense"}],
                                "fetch": {"allow_networks": ["127.0.0.0/8"]}, "max_rounds": 2}))
    config = load(path)
    assert config.tools["add_expense"].idempotent and not config.tools["add_expense"].read_only
    assert [str(n) for n in config.allow_networks] == ["127.0.0.0/8"] and config.max_rounds == 2
    assert [s.name for s in config.offered(["add_expense", "fetch_url", "add_expense"])] == ["add_expense", "fetch_url"]
    with pytest.raises(ConfigError, match="'launch'"):
        config.offered(["launch"])


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"tools": [{**TOOL, "url": "file:///etc/passwd"}]}, "url"),
        ({"tools": [{**TOOL, "kind": "shell"}]}, "kind"),
        ({"tools": [{**TOOL, "remote": "other"}]}, "remote"),
        ({"tools": [{**TOOL, "name": "no spaces allowed"}]}, "name"),
        ({"tools": [{**TOOL, "parameters": {"type": "string"}}]}, "parameters"),
        ({"tools": [{**TOOL, "read_only": True, "surprise": 1}]}, "unknown keys"),
        ({"tools": [TOOL, TOOL]}, "twice"),
        ({"tools": [{**TOOL, "name": FETCH_URL}]}, "twice"),  # a built-in cannot be replaced
        ({"mode": "yolo"}, "mode"),
        ({"fetch": {"allow_networks": ["not a network"]}}, "allow_networks"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"approval_timeout_s": 1}, "approval_timeout_s"),
        ({"rules": {"name": "r"}}, "rules"),
        ([], "object"),
    ],
)
def test_a_bad_file_is_refused_whole_naming_what_is_wrong(raw: object, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse(raw)


def test_an_mcp_servers_tool_is_named_locally_and_called_by_its_remote_name() -> None:
    config = parse({"tools": [{**TOOL, "kind": "mcp", "url": "https://mcp.example/mcp", "remote": "add"}]})
    spec = config.tools["add_expense"]
    assert (spec.kind, spec.url, spec.remote) == ("mcp", "https://mcp.example/mcp", "add")


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="PARLEY_TOOLS_FILE"):
        load(path)
