"""The pure parts of the gateway's outage handling: a drain that cuts streams at its deadline, and
the cache that lets posting go on while Cassandra is down."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from gateway.drain import Drain, is_cut, until_cut
from gateway.recent import Recent
from gateway.store import ConversationRow
from schemas.events import ConversationCreated, GenerationRequested, MessagePosted


async def _reply(chunks: int, pause: float, closed: list[bool], stop: asyncio.Queue[None]) -> AsyncIterator[dict[str, Any]]:
    """A reply's events, one every ``pause``; it stops early where it waits once ``stop`` gets an item
    (as a token stream stops on the None a drain's ``on_cut`` puts in its queue)."""
    try:
        for i in range(chunks):
            try:
                await asyncio.wait_for(stop.get(), pause)
                return
            except asyncio.TimeoutError:
                pass
            yield {"event": "delta", "data": json.dumps({"text": "x"}), "id": f"0:{i}"}
        yield {"event": "done", "data": "{}", "id": f"0:{chunks}"}
    finally:
        closed.append(True)


async def _read(drain: Drain, chunks: int, pause: float, closed: list[bool]) -> list[dict[str, Any]]:
    stop: asyncio.Queue[None] = asyncio.Queue()
    with drain.stream(on_cut=lambda: stop.put_nowait(None)):
        return [e async for e in until_cut(_reply(chunks, pause, closed, stop), drain, 3)]


async def test_a_stream_that_ends_before_the_deadline_is_untouched() -> None:
    drain, closed = Drain(), []
    reader = asyncio.create_task(_read(drain, 3, 0.01, closed))
    await asyncio.sleep(0)
    assert await drain.run(5.0) == 0
    events = await reader
    assert [e["event"] for e in events] == ["delta", "delta", "delta", "done"] and closed == [True]
    assert drain.draining and drain.live == 0


async def test_past_the_deadline_a_stream_ends_with_a_resume_hint_at_its_last_cursor() -> None:
    drain, closed = Drain(), []
    reader = asyncio.create_task(_read(drain, 1000, 0.02, closed))
    await asyncio.sleep(0.1)
    assert await drain.run(0.1) == 1
    events = await reader
    last = events[-1]
    assert is_cut(last) and json.loads(last["data"])["retry_after"] == 3
    assert last["id"] == events[-2]["id"], "the hint carries the cursor of the last chunk sent"
    assert closed == [True], "the token stream is closed"


def test_posting_knows_the_owner_and_the_branch_end_from_what_this_gateway_did() -> None:
    recent = Recent()
    created = ConversationCreated(conversation_id="00000000-0000-0000-0000-000000000001", user_id="u1")
    recent.appended(created)
    cid = created.conversation_id
    posted = MessagePosted(conversation_id=cid, user_id="u1", message_id="m1", parent_id=None, client_message_id="k", content="hi")
    asked = GenerationRequested(conversation_id=cid, user_id="u1", request_id="r1", parent_id="m1", client_message_id="k", token_offset=7)
    recent.appended(posted)
    recent.appended(asked)
    conversation = recent.conversation(cid)
    assert conversation is not None and (conversation.user_id, conversation.selected_leaf_id) == ("u1", "r1")
    messages = recent.messages(cid)
    assert messages is not None and [(m.id, m.role, m.content) for m in messages] == [("m1", "user", ""), ("r1", "assistant", "")]
    assert messages[1].stream_offset == 7 and messages[1].status == "streaming"
    # What Cassandra says replaces it when it answers.
    recent.saw(ConversationRow(cid, "u1", "", None, "m1", None), [])
    assert recent.messages(cid) == [] and recent.conversation(cid).selected_leaf_id == "m1"  # type: ignore[union-attr]
    assert recent.conversation("unknown") is None and recent.messages("unknown") is None
