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


def test_the_built_ins_over_the_users_data_are_there_only_when_the_file_names_them() -> None:
    from parley.tool_registry import FORGET, REMEMBER, SEARCH_DOCUMENTS, TOOL_KINDS, USER_KINDS

    assert SEARCH_DOCUMENTS not in load(None).tools
    config = parse({"builtins": [SEARCH_DOCUMENTS, REMEMBER, FORGET]})
    search, remember, forget = (config.tools[n] for n in (SEARCH_DOCUMENTS, REMEMBER, FORGET))
    assert (search.kind, remember.kind, forget.kind) == ("documents", "memory", "memory")
    assert {"documents", "memory"} <= TOOL_KINDS and USER_KINDS == {"documents", "memory"}
    # Search only reads, so it is allowed by default; a memory change is asked of the user.
    assert search.read_only and not remember.read_only and not forget.read_only
    assert search.parameters["required"] == ["query"] and search.parameters["properties"]["query"]["maxLength"] == 500
    for spec in (remember, forget):
        assert spec.parameters["required"] == ["fact"] and spec.parameters["additionalProperties"] is False
        fact = spec.parameters["properties"]["fact"]
        assert (fact["type"], fact["minLength"], fact["maxLength"]) == ("string", 1, 500)


@pytest.mark.parametrize("named", [["remember", "launch"], "remember", [FETCH_URL], [3]])
def test_a_builtins_list_naming_anything_else_is_refused(named: object) -> None:
    with pytest.raises(ConfigError, match="builtins"):
        parse({"builtins": named})


def test_an_operators_tool_cannot_take_a_built_ins_name() -> None:
    with pytest.raises(ConfigError, match="twice"):
        parse({"builtins": ["remember"], "tools": [{**TOOL, "name": "remember"}]})


def test_the_brokers_default_rules_allow_search_and_ask_before_a_memory_change() -> None:
    from streams import tool_policy as policy

    config = parse({"builtins": ["search_documents", "remember", "forget"]})

    def effect(name: str, arguments: str) -> policy.Effect:
        spec = config.tools[name]
        tool = policy.Tool(name, spec.parameters, spec.read_only)
        return policy.decide(tool, name, arguments, operator=()).effect

    assert effect("search_documents", '{"query": "rent"}') is policy.Effect.ALLOW
    assert effect("remember", '{"fact": "likes tea"}') is policy.Effect.ASK
    assert effect("forget", '{"fact": "likes tea"}') is policy.Effect.ASK
    assert effect("remember", '{"fact": "' + "x" * 501 + '"}') is policy.Effect.DENY  # the schema's maxLength
