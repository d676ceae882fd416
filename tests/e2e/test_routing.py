"""Routing on the real stack: cache-aware placement over three CPU-engine workers of one pool, and
admission control when a pool is driven past capacity. Real processes, broker, database and HTTP.

Each test module starts its own stacks (its own topics and keyspace): the workers and settings differ
from the shared e2e stack's. No timing assertions; waits have generous deadlines.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.fleet import COMMON_ENV, EXPIRY_S, HEARTBEAT_S, RoutingStack, start_stack, stop_stack
from tools.client import ParleyClient
from tools.topology import WORKER_MEDIUM, WORKER_SMALL


# ------------------------------------------------------------------ three workers, one pool


@pytest.fixture(scope="module")
def three(infra, tmp_path_factory) -> Iterator[RoutingStack]:
    env = {
        **COMMON_ENV,
        "PARLEY_ENGINE_TTFT_MS": "20",
        "PARLEY_ENGINE_TOKENS_PER_S": "400",
        "PARLEY_CONTEXT_MAX_TOKENS": "30",
        "PARLEY_ROUTER_POOLS": "small=test-small",  # every turn on the one pool the three workers serve
    }
    workers = [(f"w{i}", WORKER_SMALL, {}) for i in range(3)]
    stack = start_stack("routing", tmp_path_factory.mktemp("routing-logs"), env, workers)
    try:
        yield stack
    finally:
        stop_stack(stack)


async def converse(client: ParleyClient, cid: str, texts: list[str]) -> list[tuple[str, dict]]:
    """(reply id, usage) of each turn, in order."""
    out = []
    for text in texts:
        reply = await client.send(cid, text)
        assert reply.final is not None and reply.final.event == "done", reply.final
        out.append((reply.head["reply_id"], reply.final.data["usage"]))
    return out


async def test_a_conversation_stays_on_its_worker_and_moves_when_that_worker_dies(three: RoutingStack) -> None:
    client = three.client()
    try:
        cid = await client.create_conversation("sticky")
        # A long, unique first message: only the engine that served it can have it cached.
        opening = f"Conversation {uuid.uuid4().hex}: " + " ".join(f"word{i}" for i in range(60))
        turns = await converse(client, cid, [opening, "and then?", "go on", "once more"])
        ids = [rid for rid, _ in turns]
        routed, done = three.routed(set(ids)), three.completed(set(ids))
        assert len({routed[r].partition for r in ids}) == 1, "every turn on the conversation's home partition"
        assert [routed[r].route_reason for r in ids] == ["classifier", "sticky", "sticky", "sticky"]
        replicas = {done[r].replica for r in ids}
        assert len(replicas) == 1 and replicas <= set(three.workers), replicas
        first_prompt = turns[0][1]["prompt_tokens"]
        for _, usage in turns[1:]:  # the first prompt is found in that engine's prefix cache (all but its tail)
            assert usage["cached_tokens"] >= 0.9 * first_prompt > 0, (usage, first_prompt)

        (home,) = replicas
        three.workers[home].process.kill()  # SIGKILL: no goodbye heartbeat; the router notices the silence
        three.workers[home].process.wait(30)
        time.sleep(EXPIRY_S + 2 * HEARTBEAT_S)  # not an assertion: the beats of the dead worker expire
        after = await converse(client, cid, ["still there?", "and now?", "last one"])
        ids2 = [rid for rid, _ in after]
        routed2, done2 = three.routed(set(ids2)), three.completed(set(ids2))
        assert routed2[ids2[0]].route_reason == "moved_gone"
        assert [routed2[r].route_reason for r in ids2[1:]] == ["sticky", "sticky"]
        new_replicas = {done2[r].replica for r in ids2}
        assert len(new_replicas) == 1 and home not in new_replicas
        assert after[2][1]["cached_tokens"] >= 0.9 * after[1][1]["prompt_tokens"], "the new worker holds it again"
    finally:
        await client.close()


# ------------------------------------------------------------------ overload


@pytest.fixture(scope="module")
def tight(infra, tmp_path_factory) -> Iterator[RoutingStack]:
    """small and medium, one worker each running one generation at a time, on a slow engine."""
    env = {
        **COMMON_ENV,
        "PARLEY_ENGINE_TTFT_MS": "300",
        "PARLEY_ENGINE_TOKENS_PER_S": "10",
        "PARLEY_CONTEXT_MAX_TOKENS": "30",
        "PARLEY_WORKER_MAX_CONCURRENCY": "1",
        "PARLEY_WORKER_MAX_QUEUED": "1",
        "PARLEY_ROUTER_POOLS": "small=test-small,medium=test-medium",
        "PARLEY_ROUTER_RETRY_AFTER_S": "3",
        "PARLEY_ROUTER_PAID_LIMIT": "20",  # enterprise's reserved share: queued, never shed here
    }
    workers = [("small-0", WORKER_SMALL, {}), ("medium-0", WORKER_MEDIUM, {})]
    stack = start_stack("overload", tmp_path_factory.mktemp("overload-logs"), env, workers)
    try:
        yield stack
    finally:
        stop_stack(stack)


HARDISH = "Why does this fail?\n```python\ndef f(x):\n    return x/0\n```"  # the classifier's medium


async def test_past_capacity_free_turns_are_downgraded_then_shed_and_enterprise_completes(tight: RoutingStack) -> None:
    free = [tight.client("free") for _ in range(8)]
    enterprise = [tight.client("enterprise") for _ in range(2)]
    try:
        cids = [await c.create_conversation() for c in free + enterprise]
        replies = await asyncio.gather(*(c.send(cid, HARDISH) for c, cid in zip(free + enterprise, cids)))
        free_replies, paid_replies = replies[: len(free)], replies[len(free):]

        for reply in paid_replies:
            assert reply.final is not None and reply.final.event == "done", reply.final
        shed = [r for r in free_replies if r.final is not None and r.final.event == "error"]
        assert shed, "the pool was driven past capacity: some free turns are shed"
        for reply in shed:
            assert reply.final.data["code"] == "overloaded" and reply.final.data["retry_after"] >= 3, reply.final.data
        assert all(r.final.event in ("done", "error") for r in free_replies)

        ids = {r.head["reply_id"] for r in replies}
        outcome = tight.completed(ids)
        rejected = [outcome[r.head["reply_id"]] for r in shed]
        assert all((c.finish_reason, c.error_code) == ("rejected", "overloaded") for c in rejected)
        served_free = {r.head["reply_id"] for r in free_replies} - {c.request_id for c in rejected}
        down = [e for e in tight.routed(served_free & {i for i, c in outcome.items() if c.pool == "small"}, "small").values()]
        assert down and all((e.downgraded_from, e.route_reason) == ("medium", "downgraded") for e in down)
        # Downgrading comes first: a free turn is shed only once the smaller pool is busy too.
        assert min(e.occurred_at for e in down) < min(c.occurred_at for c in rejected)
        for reply in paid_replies:
            assert outcome[reply.head["reply_id"]].pool == "medium", "paid turns are not downgraded"
    finally:
        for c in free + enterprise:
            await c.close()
