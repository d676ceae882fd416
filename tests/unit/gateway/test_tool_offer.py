"""What a posted message's ``tools`` may be (gateway/tool_calls.py offered): the operator's tools by name,
each at most once, or a 422 naming what is wrong."""

from __future__ import annotations

import json

import pytest

from gateway.errors import Unprocessable
from gateway.tool_calls import MAX_TOOLS, offered
from parley.tool_registry import parse

CONFIG = parse({"tools": [{"name": "add_expense", "url": "https://x.example/add", "description": "Add"}]})


def test_named_tools_are_offered_for_parley_to_run_with_their_schemas() -> None:
    tools = offered(CONFIG, ["add_expense", "fetch_url", "add_expense"])
    assert tools is not None and tools.runner == "parley" and tools.choice == "auto"
    assert [f.name for f in tools.functions] == ["add_expense", "fetch_url"]
    assert json.loads(tools.functions[1].parameters)["required"] == ["url"]


@pytest.mark.parametrize("named", [None, []])
def test_no_tools_is_no_offer(named: object) -> None:
    assert offered(CONFIG, named) is None


@pytest.mark.parametrize(
    ("named", "code"),
    [("fetch_url", "invalid_tools"), ([1], "invalid_tools"), (["x"] * (MAX_TOOLS + 1), "invalid_tools"),
     (["launch_rockets"], "unknown_tool")],
)
def test_anything_else_is_refused_by_name(named: object, code: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        offered(CONFIG, named)
    assert refused.value.code == code
