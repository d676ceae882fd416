"""An organisation's MCP servers on real Cassandra (parley/org_tools.py) and `parley tools add NAME URL --org`:
listed through the SSRF guard with the tools file's allowance, kept as one row, read back as the gateway, the
broker and the executor read them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parley.cassandra import AsyncCql
from parley.org_tools import OrgTools
from parley.users import create_org
from tests.fixtures.mcp_server import echoing, serving
from tools.cli import app


@pytest.fixture(scope="module")
def url() -> object:
    with serving(echoing("crm", "find", "Find a customer")) as served:
        yield served


def test_an_operator_adds_a_server_for_one_organisation_through_the_guard(cassandra, cassandra_settings, url, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PARLEY_KEYSPACE", cassandra_settings.keyspace)
    cassandra.set_keyspace(cassandra_settings.keyspace)
    org = create_org(cassandra, "crm-team")
    closed, opened = tmp_path / "closed.json", tmp_path / "opened.json"
    closed.write_text(json.dumps({}))
    opened.write_text(json.dumps({"fetch": {"allow_networks": ["127.0.0.0/8"]}}))

    refused = CliRunner().invoke(app, ["tools", "add", "crm", url, "--org", org, "--file", str(closed)])
    assert refused.exit_code != 0 and "loopback" in refused.output  # the guard, before anything was kept
    unknown = CliRunner().invoke(app, ["tools", "add", "crm", url, "--org", "o_nobody", "--file", str(opened)])
    assert unknown.exit_code != 0 and "no organisation" in unknown.output
    added = CliRunner().invoke(app, ["tools", "add", "crm", url, "--org", org, "--file", str(opened)])
    assert added.exit_code == 0, added.output

    async def read() -> tuple[list, dict]:
        table = OrgTools(AsyncCql(cassandra_settings, cassandra))
        return await table.servers(org), await table.specs("o_someone_else")

    servers, others = asyncio.run(read())
    [server] = servers
    [tool] = server.tools
    assert (server.name, server.url, tool.name, tool.remote, tool.guarded, tool.read_only) == ("crm", url, "crm_find", "find", True, False)
    assert tool.parameters["required"] == ["text"] and others == {}
