"""What a posted message's ``tools`` may be (gateway/tool_calls.py offered): the operator's tools by name,
or the caller's organisation's, each at most once, or a 422 naming what is wrong."""

from __future__ import annotations

import json

import pytest

from gateway.errors import Unprocessable
from gateway.tool_calls import MAX_TOOLS, offered
from parley.org_tools import Listed, checked
from parley.tool_registry import ToolSpec, parse

CONFIG = parse({"tools": [{"name": "add_expense", "url": "https://x.example/add", "description": "Add"}]})
LEDGER = checked("ledger", "https://mcp.acme.example/mcp", [
    Listed("add", "Add a row", {"type": "object", "properties": {"n": {"type": "integer"}}}),
    Listed("balance", "The balance", {"type": "object"}),
])  # fmt: skip


class OrgTools:
    """The organisations' table as the gateway reads it: acme registered the ledger server."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    async def specs(self, org_id: str) -> dict[str, ToolSpec]:
        self.reads.append(org_id)
        return {t.name: t for t in LEDGER.tools} if org_id == "acme" else {}


async def test_named_tools_are_offered_for_parley_to_run_with_their_schemas() -> None:
    orgs = OrgTools()
    tools = await offered(CONFIG, orgs, "acme", ["add_expense", "fetch_url", "add_expense"])
    assert tools is not None and tools.runner == "parley" and tools.choice == "auto"
    assert [f.name for f in tools.functions] == ["add_expense", "fetch_url"]
    assert json.loads(tools.functions[1].parameters)["required"] == ["url"]
    assert orgs.reads == []  # all the operator's: the organisation's table is not read


async def test_an_organisations_tools_are_offered_to_its_members_alone() -> None:
    orgs = OrgTools()
    tools = await offered(CONFIG, orgs, "acme", ["ledger_add", "fetch_url"])
    assert tools is not None and [f.name for f in tools.functions] == ["ledger_add", "fetch_url"]
    assert json.loads(tools.functions[0].parameters)["properties"] == {"n": {"type": "integer"}}
    for org in ("globex", ""):  # another organisation's member, a user of none
        with pytest.raises(Unprocessable) as refused:
            await offered(CONFIG, orgs, org, ["ledger_add"])
        assert refused.value.code == "unknown_tool"


@pytest.mark.parametrize("named", [None, []])
async def test_no_tools_is_no_offer(named: object) -> None:
    assert await offered(CONFIG, OrgTools(), "acme", named) is None


@pytest.mark.parametrize(
    ("named", "code"),
    [("fetch_url", "invalid_tools"), ([1], "invalid_tools"), (["x"] * (MAX_TOOLS + 1), "invalid_tools"),
     (["launch_rockets"], "unknown_tool")],
)
async def test_anything_else_is_refused_by_name(named: object, code: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        await offered(CONFIG, OrgTools(), "acme", named)
    assert refused.value.code == code
