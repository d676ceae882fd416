"""`parley tools add NAME URL` against a real MCP server (the SDK's own, as in test_tool_mcp): each of its
tools lands in the operator's file as NAME_<tool>, never read-only or idempotent on the server's word."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from parley.tool_registry import load
from tests.unit.workers.test_tool_mcp import Ledger, served  # noqa: F401  (the fixture)
from tools.cli import app


def test_an_mcp_servers_tools_are_added_with_their_schemas_and_no_trust(served: tuple[str, Ledger], tmp_path: Path) -> None:  # noqa: F811
    url, _ = served
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"mode": "ask"}))
    result = CliRunner().invoke(app, ["tools", "add", "ledger", url, "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert "not trusted" in " ".join(result.output.split())  # add_expense says it is idempotent: shown, not taken
    config = load(path)
    spec = config.tools["ledger_add_expense"]
    assert (spec.kind, spec.url, spec.remote, spec.read_only, spec.idempotent) == ("mcp", url, "add_expense", False, False)
    assert spec.parameters["properties"].keys() >= {"amount", "note"} and config.mode == "ask"
    again = CliRunner().invoke(app, ["tools", "add", "ledger", url, "--file", str(path)])
    assert again.exit_code != 0 and "twice" in " ".join(again.output.split())  # the file is checked whole and left as it was
    assert load(path).tools.keys() == config.tools.keys()
