"""A worker lost mid-reply, on the real stack: two synthetic-engine workers on one pool, a reply slow
enough (``PARLEY_ENGINE_TOKENS_PER_S``) to take several seconds, and the worker serving it killed
(SIGKILL) or stopped (SIGTERM with a short drain deadline) while the client reads it over SSE.

The other worker inherits the partition, finds the partial reply on chat.tokens
(workers/recovery.py) and continues it as attempt 1: the client sees ``restarted`` then ``done``,
and the stored reply is the text the client ends up showing, once. No timing assertions; the
consumer group's session timeout is shortened (``PARLEY_WORKER_SESSION_TIMEOUT_MS``) so the dead
member's partition moves within the test's deadlines.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from schemas.events import Event, TokenChunk
from tests.e2e.fleet import COMMON_ENV, RoutingStack, read_all, start_stack, stop_stack, wait_for_fleet
from tools import isolated
from tools.client import ParleyClient, Reply, reply_text
from tools.topology import WORKER_SMALL

DEADLINE_S = 120.0
#: Tokens of every reply, at TOKENS_PER_S: about eight seconds each.
REPLY_TOKENS = 48
TOKENS_PER_S = 6


@pytest.fixture(scope="module")
def pair(infra, tmp_path_factory) -> Iterator[RoutingStack]:
    env = {
        **COMMON_ENV,
        "PARLEY_ENGINE_TTFT_MS": "50",
        "PARLEY_ENGINE_TOKENS_PER_S": str(TOKENS_PER_S),
        "PARLEY_CONTEXT_MAX_TOKENS": str(REPLY_TOKENS),
        "PARLEY_ROUTER_POOLS": "small=test-small",
        "PARLEY_WORKER_SESSION_TIMEOUT_MS": "6000",  # the broker's least, by default
        "PARLEY_WORKER_DRAIN_TIMEOUT_S": "1",  # SIGTERM hands back a reply it cannot finish in 1 s
    }
    workers = [(f"w{i}", WORKER_SMALL, {}) for i in range(2)]
    stack = start_stack("crash", tmp_path_factory.mktemp("crash-logs"), env, workers)
    try:
        yield stack
    finally:
        stop_stack(stack)


def serving_worker(stack: RoutingStack, reply_id: str) -> str:
    """The worker id on the reply's first chunk."""

    def first(events: list[Event]) -> TokenChunk | None:
        return next((e for e in events if isinstance(e, TokenChunk) and e.request_id == reply_id), None)

    chunk = first(read_all(stack.inner.kafka, "chat.tokens", lambda es: first(es) is not None, "the reply's first chunk"))
    assert chunk is not None
    return chunk.replica


async def turn_losing_its_worker(stack: RoutingStack, client: ParleyClient, cid: str, lose: Any) -> tuple[Reply, str]:
    """Stream a turn; after three deltas call ``lose(worker_id)`` on the worker serving it; read to the end."""
    reply = Reply()
    lost = ""
    stream = client.stream_message(cid, "Tell me a long story about event sourcing.")
    async for event in stream:
        reply.events.append(event)
        if not lost and sum(e.event == "delta" for e in reply.events) == 3:
            lost = await asyncio.to_thread(serving_worker, stack, reply.head["reply_id"])
            lose(lost)
    return reply, lost


async def stored_reply(client: ParleyClient, cid: str, reply_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The reply's row once it is final, and every assistant message of the conversation."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        conversation = await client.conversation(cid)
        assistants = [m for m in conversation["messages"] if m["role"] == "assistant"]
        found = next((m for m in assistants if m["id"] == reply_id), None)
        if found is not None and found["status"] != "streaming":
            return found, assistants
        assert time.monotonic() < deadline, "the reply was not stored as finished"
        await asyncio.sleep(0.5)


def assert_resumed_once(stack: RoutingStack, reply: Reply, stored: dict[str, Any], assistants: list[dict[str, Any]]) -> None:
    final = reply.final
    assert final is not None and final.event == "done", final
    assert final.data["finish_reason"] in ("stop", "length")
    (restarted,) = reply.restarts
    assert restarted.data["message_id"] == reply.head["reply_id"] and restarted.data["attempt"] == 1
    before = reply_text(reply.events[: reply.events.index(restarted)])
    kept = restarted.data["offset_chars"]
    assert 0 < kept <= len(before), "it continued from text the client had been shown"
    text = reply.text
    assert text.startswith(before[:kept]) and len(text) > kept
    assert stored["content"] == text, "the stored reply is what the client shows"
    assert text[kept:] and not text[kept:].startswith(before[:kept]), "the prefix is not repeated"
    assert len(assistants) == 1, "one assistant message for the turn"
    row = stack.inner.session.execute(  # type: ignore[attr-defined]
        "SELECT attempt FROM messages WHERE conversation_id = %s AND message_id = %s",
        (_uuid(reply.head["conversation_id"]), _uuid(reply.head["reply_id"])),
    ).one()
    assert row.attempt == 1


def _uuid(value: str) -> Any:
    import uuid

    return uuid.UUID(value)


async def test_a_worker_killed_mid_reply_is_replaced_and_the_reply_carries_on(pair: RoutingStack) -> None:
    client = pair.client()
    try:
        cid = await client.create_conversation("crash")
        reply, lost = await turn_losing_its_worker(pair, client, cid, lambda w: pair.workers[w].process.kill())
        assert pair.workers[lost].process.wait(30) == -signal.SIGKILL
        stored, assistants = await stored_reply(client, cid, reply.head["reply_id"])
        assert_resumed_once(pair, reply, stored, assistants)
    finally:
        await client.close()


async def test_a_worker_stopped_mid_reply_exits_cleanly_and_hands_the_reply_over(pair: RoutingStack) -> None:
    alive = [w for w, child in pair.workers.items() if child.process.poll() is None]
    if len(alive) < 2:  # the previous test killed one: a replacement, so the pool has two again
        _, pair.workers["w2"] = isolated.add_worker(pair.inner, WORKER_SMALL, "w2", {})
        alive.append("w2")
        await asyncio.to_thread(wait_for_fleet, pair.inner.kafka, {w: "small" for w in alive})
    client = pair.client()
    try:
        cid = await client.create_conversation("drain")
        reply, stopped = await turn_losing_its_worker(
            pair, client, cid, lambda w: pair.workers[w].process.send_signal(signal.SIGTERM)
        )
        assert await asyncio.to_thread(pair.workers[stopped].process.wait, 60) == 0, "a drained worker exits 0"
        stored, assistants = await stored_reply(client, cid, reply.head["reply_id"])
        assert_resumed_once(pair, reply, stored, assistants)
    finally:
        await client.close()
