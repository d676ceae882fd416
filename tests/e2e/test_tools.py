"""Parley's own tools end to end (DESIGN.md §13), on the shared e2e stack (its permission broker and tool
executor, real Kafka and Cassandra, the synthetic engine).

The tools are a local HTTP service that counts effects per idempotency key (tests/e2e/tool_service.py, what a
payment API does with ``Idempotency-Key``). The model's calls are scripted (the synthetic engine's
``[[reply:…]]``); the service's answer scripts the model's next reply, so each test sees the whole loop: a
call judged by the operator's rules, run at most once, its result quoted into the next turn, and the final
reply. Killing the executor here is safe for the other modules: each pytest worker has its own stack and
runs its tests one after another.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import pytest
import pytest_asyncio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from parley.users import create_org, create_user
from tests.e2e.conftest import REPLY_DEADLINE_S, Stack
from tests.e2e.tool_service import Effects, calls, scripted
from tests.fixtures.mcp_server import free_port, serving
from workers.tool_mcp import IDEMPOTENCY_KEY
from tools import isolated
from tools.client import ApiError, ParleyClient
from tools.topology import TOOL_EXECUTOR

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def effects(stack: Stack) -> Effects:
    return stack.effects


@pytest.fixture
def tool_stack(stack: Stack) -> isolated.IsolatedStack:
    return stack.inner


@pytest_asyncio.fixture(loop_scope="function")  # the test's own loop, which its client's connections live on
async def client(tool_stack: isolated.IsolatedStack) -> Any:
    _, key = tool_stack.create_user("tools", "plus")
    c = ParleyClient(tool_stack.url, key, reply_deadline_s=REPLY_DEADLINE_S)
    yield c
    await c.close()


async def until(check: Any, what: str, timeout_s: float = REPLY_DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        await asyncio.sleep(0.3)


async def call_in(
    c: ParleyClient, cid: str, state: str | None = None, outcome: str | None = None, reply_id: str | None = None
) -> dict[str, Any]:
    """The first call of ``cid`` (of the reply ``reply_id``, if named) in ``state`` with ``outcome``, waited for."""

    async def found() -> dict[str, Any] | None:
        for call in await c.tool_calls(cid):
            if (state is None or call["state"] == state) and (outcome is None or call["outcome"] == outcome) and (
                reply_id is None or call["reply_id"] == reply_id
            ):
                return call
        return None

    return await until(found, f"tool call in state {state} / outcome {outcome}")


async def final_reply(c: ParleyClient, cid: str) -> dict[str, Any]:
    """The reply after the tool messages, once it has ended."""

    async def found() -> dict[str, Any] | None:
        messages = (await c.conversation(cid))["messages"]
        tools = {m["id"] for m in messages if m["role"] == "tool"}
        return next(
            (m for m in messages if m["role"] == "assistant" and m["parent_id"] in tools and m["status"] != "streaming"),
            None,
        )

    return await until(found, "reply after the tool results")


async def test_an_allowed_call_runs_once_and_its_result_continues_the_turn(client: ParleyClient, effects: Effects) -> None:
    cid = await client.create_conversation()
    first = await client.send(cid, calls(("add_expense", {"amount": 12, "item": "lunch"})), tools=["add_expense"])
    assert first.final is not None and first.final.event == "done"
    call = await call_in(client, cid, outcome="ok")
    assert (call["decision"], call["rule"]) == ("allow", "operator:small-expenses")
    reply = await final_reply(client, cid)
    assert reply["content"].strip() == "Saved lunch for 12." and reply["status"] == "complete"
    assert effects.effects[call["id"]] == 1
    [tool_message] = [m for m in (await client.conversation(cid))["messages"] if m["role"] == "tool"]
    assert "untrusted data" in tool_message["content"]


async def test_arguments_outside_the_allow_rule_are_asked_and_run_once_approved(client: ParleyClient, effects: Effects) -> None:
    cid = await client.create_conversation()
    await client.send(cid, calls(("add_expense", {"amount": 500, "item": "laptop"})), tools=["add_expense"])
    call = await call_in(client, cid, state="asked")
    assert call["decision"] == "ask" and effects.effects[call["id"]] == 0
    await client.answer_tool_call(cid, call["id"], "approve")
    assert (await final_reply(client, cid))["content"].strip() == "Saved laptop for 500."
    assert effects.effects[call["id"]] == 1
    with pytest.raises(ApiError) as again:
        await client.answer_tool_call(cid, call["id"], "approve")
    assert again.value.status == 409


async def test_an_edit_runs_with_the_owners_arguments_and_a_rejection_never_runs(client: ParleyClient, effects: Effects) -> None:
    edited = await client.create_conversation()
    await client.send(edited, calls(("add_expense", {"amount": 900, "item": "tv"})), tools=["add_expense"])
    call = await call_in(client, edited, state="asked")
    await client.answer_tool_call(edited, call["id"], "edit", {"amount": 90, "item": "tv"})
    assert (await final_reply(client, edited))["content"].strip() == "Saved tv for 90."
    assert effects.bodies[call["id"]] == {"amount": 90, "item": "tv"}

    rejected = await client.create_conversation()
    await client.send(rejected, calls(("add_expense", {"amount": 800, "item": "boat"})), tools=["add_expense"])
    call = await call_in(client, rejected, state="asked")
    await client.answer_tool_call(rejected, call["id"], "reject")
    assert (await call_in(client, rejected, outcome="rejected"))["id"] == call["id"]
    await final_reply(client, rejected)
    assert effects.effects[call["id"]] == 0


async def test_remember_is_asked_and_once_approved_the_fact_is_in_the_users_memory(client: ParleyClient) -> None:
    """The built-in's change (a MemoryUpdated) commits with the call's finish; GET /v1/memory shows it."""
    fact = f"prefers window seats {uuid.uuid4().hex[:6]}"
    cid = await client.create_conversation()
    await client.send(cid, calls(("remember", {"fact": fact})), tools=["remember"])
    call = await call_in(client, cid, state="asked")
    assert (call["decision"], call["rule"]) == ("ask", "no-rule")
    assert fact not in [f["text"] for f in (await client._json("GET", "/v1/memory"))["facts"]]
    await client.answer_tool_call(cid, call["id"], "approve")
    assert (await call_in(client, cid, outcome="ok"))["id"] == call["id"]

    async def remembered() -> bool:
        return fact in [f["text"] for f in (await client._json("GET", "/v1/memory"))["facts"]]

    await until(remembered, "remembered fact")


async def test_search_documents_is_allowed_and_searches_only_the_callers_own_documents(client: ParleyClient) -> None:
    cid = await client.create_conversation()
    await client.send(cid, calls(("search_documents", {"query": "quarterly revenue"})), tools=["search_documents"])
    call = await call_in(client, cid, outcome="ok")
    assert call["decision"] == "allow"
    assert "The user has no documents to search." in call["result"]

    async def tool_message() -> dict[str, Any] | None:  # the broker's, projected after the call's row
        return next((m for m in (await client.conversation(cid))["messages"] if m["role"] == "tool"), None)

    assert "The user has no documents to search." in (await until(tool_message, "tool message"))["content"]


async def test_a_denied_call_never_reaches_the_tool_and_strangers_see_nothing(
    client: ParleyClient, effects: Effects, tool_stack: isolated.IsolatedStack
) -> None:
    cid = await client.create_conversation()
    await client.send(cid, calls(("delete_everything", {})), tools=["delete_everything"])
    call = await call_in(client, cid, outcome="denied")
    assert call["rule"] == "operator:no-deletes"
    await final_reply(client, cid)
    assert effects.requests["/delete"] == 0
    _, other_key = tool_stack.create_user("stranger", "plus")
    stranger = ParleyClient(tool_stack.url, other_key)
    try:
        for attempt in (stranger.tool_calls(cid), stranger.answer_tool_call(cid, call["id"], "approve")):
            with pytest.raises(ApiError) as refused:
                await attempt
            assert refused.value.status == 404
    finally:
        await stranger.close()
    with pytest.raises(ApiError) as unknown:
        await client.send(cid, "hello", tools=["launch_rockets"])
    assert unknown.value.status == 422 and "launch_rockets" in str(unknown.value.body)


def _restart_executor(stack: isolated.IsolatedStack) -> None:
    child = next(c for c in reversed(stack.supervisor.children) if c.service.name == TOOL_EXECUTOR.name)
    child.process.kill()  # SIGKILL, mid-call
    child.process.wait()
    stack.supervisor.wait_ready(stack.supervisor.start(TOOL_EXECUTOR))


@pytest.mark.parametrize(("tool", "outcome", "requests"), [("charge_card", "unknown", 1), ("add_expense", "ok", 2)])
async def test_an_executor_killed_mid_call_never_repeats_the_effect(
    client: ParleyClient, effects: Effects, tool_stack: isolated.IsolatedStack, tool: str, outcome: str, requests: int
) -> None:
    """The tool took effect and the executor died before its answer came back. charge_card does not honour the
    idempotency key: the next owner reports the outcome unknown and never calls it again. add_expense does:
    the next owner asks again with the same key and gets the first answer, with no second effect. (Told the
    outcome is unknown, the scripted model calls again: a new call, with an id of its own.)"""
    effects.hold_item = item = f"slow {uuid.uuid4().hex[:6]}"  # this test's call only, not an earlier one's repeat
    effects.held.clear()
    effects.release.clear()
    cid = await client.create_conversation()
    first = await client.send(cid, calls((tool, {"amount": 7, "item": item})), tools=[tool])
    assert await asyncio.to_thread(effects.held.wait, REPLY_DEADLINE_S), "the call never reached the tool"
    await asyncio.to_thread(_restart_executor, tool_stack)
    effects.release.set()
    call = await call_in(client, cid, state="finished", reply_id=first.head["reply_id"])
    assert call["outcome"] == outcome
    assert effects.effects[call["id"]] == 1 and effects.asked[call["id"]] == requests


# ------------------------------------------------------------------ an organisation's own MCP server


class Notes:
    """An organisation's MCP server: ``add`` keeps a note, counting calls per idempotency key."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.server = MCPServer("notes", log_level="WARNING")

        @self.server.tool(description="Keep a note", annotations=ToolAnnotations(read_only_hint=True))  # a hint only
        async def add(text: str, ctx: Context) -> str:
            self.calls[str((ctx.request_context.meta or {}).get(IDEMPOTENCY_KEY))] += 1
            return scripted(f"Noted: {text}.")


@pytest.fixture(scope="module")
def notes() -> Any:
    found = Notes()
    with serving(found.server) as url:
        yield found, url


async def test_an_organisations_mcp_server_serves_its_members_alone_every_call_asked_and_run_once(
    stack: Stack, notes: tuple[Notes, str]
) -> None:
    """An admin registers the team's MCP server (through the SSRF guard: the shared stack's operator opened
    127.0.0.0/8, no other private network); a member's call of its tool is asked though the server calls it
    read-only, runs once with the call id as its idempotency key once approved, and continues the turn;
    another organisation's user cannot offer it; once removed, nobody can."""
    server, url = notes
    team = create_org(stack.inner.session, "notes-team")
    admin_id, _ = create_user(stack.inner.session, "ada", "plus", org_id=team, role="admin")
    _, member_key = create_user(stack.inner.session, "bea", "plus", org_id=team)
    admin, member = stack.web_client(admin_id), ParleyClient(stack.url, member_key, reply_deadline_s=REPLY_DEADLINE_S)
    stranger = ParleyClient(stack.url, stack.new_key("plus"))
    try:
        for body, status, code in (
            ({"name": "intranet", "url": "http://10.20.30.40/mcp"}, 422, "address_refused"),
            ({"name": "cloud", "url": "http://169.254.169.254/mcp"}, 422, "address_refused"),
            ({"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp"}, 422, "server_unreachable"),
        ):
            with pytest.raises(ApiError) as refused:
                await admin._json("POST", "/v1/org/tools", json=body)
            assert (refused.value.status, refused.value.body["error"]["code"]) == (status, code), body
        with pytest.raises(ApiError) as not_admin:
            await member._json("POST", "/v1/org/tools", json={"name": "notes", "url": url})
        assert not_admin.value.status == 403
        kept = await admin._json("POST", "/v1/org/tools", json={"name": "notes", "url": url})
        assert [t["name"] for t in kept["tools"]] == ["notes_add"]
        assert [s["name"] for s in (await member._json("GET", "/v1/org/tools"))["servers"]] == ["notes"]

        cid = await member.create_conversation()
        await member.send(cid, calls(("notes_add", {"text": "buy milk"})), tools=["notes_add"])
        call = await call_in(member, cid, state="asked")
        assert (call["decision"], call["rule"]) == ("ask", "no-rule")  # the server's read-only hint is not trusted
        await member.answer_tool_call(cid, call["id"], "approve")
        assert (await final_reply(member, cid))["content"].strip() == "Noted: buy milk."
        assert server.calls[call["id"]] == 1

        with pytest.raises(ApiError) as foreign:
            await stranger.send(await stranger.create_conversation(), "hello", tools=["notes_add"])
        assert (foreign.value.status, foreign.value.body["error"]["code"]) == (422, "unknown_tool")
        await admin._json("DELETE", "/v1/org/tools/notes")
        assert (await member._json("GET", "/v1/org/tools"))["servers"] == []
        with pytest.raises(ApiError) as removed:
            await member.send(cid, "again", tools=["notes_add"])
        assert removed.value.status == 422
    finally:
        for c in (admin, member, stranger):
            await c.close()
