"""Scaling by consumer groups (issue 7): a second worker or processor joins its group, takes over part of
the partitions and serves; a drained one hands its partitions back and nothing is lost.

Real processes on a stack of their own; the seconds a takeover took are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from parley.ops import Ops
from schemas.catalog import TOPICS
from tests.e2e.fleet import COMMON_ENV, RoutingStack, start_stack, stop_stack, wait_for_fleet
from tools.client import ParleyClient
from tools.topology import CONTEXT, WORKER_SMALL

ENV = {
    **COMMON_ENV,
    "PARLEY_ENGINE_TTFT_MS": "50",
    "PARLEY_ENGINE_TOKENS_PER_S": "40",  # replies of a few seconds: some are in flight when a worker drains
    "PARLEY_CONTEXT_MAX_TOKENS": "60",
    "PARLEY_ROUTER_POOLS": "small=test-small",
}


@pytest.fixture(scope="module")
def scaled(infra, tmp_path_factory) -> Iterator[RoutingStack]:
    stack = start_stack("scaling", tmp_path_factory.mktemp("scaling-logs"), ENV, [("w0", WORKER_SMALL, {})])
    try:
        yield stack
    finally:
        stop_stack(stack)


async def turns(client: ParleyClient, n: int, label: str) -> list[str]:
    """``n`` new conversations, one turn each, all at once; the reply ids (every one must end with done)."""

    async def one(i: int) -> str:
        cid = await client.create_conversation(f"{label}-{i}")
        reply = await client.send(cid, f"{label} {i} {uuid.uuid4().hex}: tell me a long story")
        assert reply.final is not None and reply.final.event == "done", reply.final
        return str(reply.head["reply_id"])

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def members(stack: RoutingStack, group: str) -> dict[str, list[int]]:
    """member id → partitions it owns, as the broker tells `parley ops groups`."""
    (described,) = Ops(stack.inner.kafka).groups([group])
    return {m.member_id: [p for _, p in m.partitions] for m in described.members}


def wait_members(stack: RoutingStack, group: str, count: int, deadline_s: float = 90.0) -> dict[str, list[int]]:
    deadline = time.monotonic() + deadline_s
    while True:
        owned = members(stack, group)
        if len(owned) == count and all(owned.values()):
            return owned
        assert time.monotonic() < deadline, f"{group} did not settle on {count} members owning partitions: {owned}"
        time.sleep(0.5)


async def test_a_second_worker_takes_partitions_serves_and_hands_them_back_when_drained(scaled: RoutingStack) -> None:
    client = scaled.client()
    try:
        first = scaled.completed(set(await turns(client, 4, "alone")))
        assert {c.replica for c in first.values()} == {"w0"}

        began = time.monotonic()
        from tools import isolated

        _, scaled.workers["w1"] = isolated.add_worker(scaled.inner, WORKER_SMALL, "w1")
        wait_for_fleet(scaled.inner.kafka, {"w0": "small", "w1": "small"})
        print(f"\nsecond worker serving {time.monotonic() - began:.1f}s after its start")

        both = scaled.completed(set(await turns(client, 12, "pair")))
        assert {c.replica for c in both.values()} == {"w0", "w1"}, "new conversations land on both workers"

        # Drain w1 while replies are in flight: they finish (on w1, or on w0 after a hand-back); none is lost.
        pending = asyncio.create_task(turns(client, 8, "drain"))
        await asyncio.sleep(1.0)
        w1 = scaled.workers["w1"].process
        w1.send_signal(signal.SIGTERM)
        drained = scaled.completed(set(await pending))
        assert await asyncio.to_thread(w1.wait, 60) == 0, "a drained worker exits 0"
        assert len(drained) == 8 and all(c.finish_reason in ("stop", "length") for c in drained.values())
        wait_for_fleet(scaled.inner.kafka, {"w0": "small"})
        after = scaled.completed(set(await turns(client, 3, "after")))
        assert {c.replica for c in after.values()} == {"w0"}
    finally:
        await client.close()


async def test_a_second_context_builder_shares_the_partitions_and_turns_still_complete(scaled: RoutingStack) -> None:
    group = scaled.inner.kafka.topic_prefix + "streams.context"
    assert len(wait_members(scaled, group, 1)) == 1
    extra = scaled.inner.supervisor.start(CONTEXT, name="context-2")
    try:
        scaled.inner.supervisor.wait_ready(extra)
        owned = wait_members(scaled, group, 2)
        split = sorted(p for ps in owned.values() for p in ps)
        assert split == list(range(TOPICS["chat.events"].partitions)), owned
        client = scaled.client()
        try:
            done = scaled.completed(set(await turns(client, 6, "ctx")))
            assert len(done) == 6
        finally:
            await client.close()
    finally:
        assert scaled.inner.supervisor.stop(extra) == 0
    assert len(wait_members(scaled, group, 1)) == 1


async def test_one_worker_fronting_two_engines_is_two_replicas_to_the_router(scaled: RoutingStack) -> None:
    """PARLEY_WORKER_ENGINE_URLS with two engines: two group members with their own partitions and
    heartbeats, and new conversations placed on each engine; SIGTERM drains both and the process exits 0."""
    from tools import isolated

    _, scaled.workers["wm"] = isolated.add_worker(scaled.inner, WORKER_SMALL, "wm", engines=2)
    wait_for_fleet(scaled.inner.kafka, {"w0": "small", "wm.0": "small", "wm.1": "small"})
    client = scaled.client()
    try:
        done = scaled.completed(set(await turns(client, 18, "multi")))
        assert {"wm.0", "wm.1"} <= {c.replica for c in done.values()}, "each engine of the one worker serves"
        assert all(c.finish_reason in ("stop", "length") for c in done.values())
    finally:
        await client.close()
    process = scaled.workers.pop("wm").process
    process.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(process.wait, 60) == 0, "both replicas drained and left"
    wait_for_fleet(scaled.inner.kafka, {"w0": "small"})
