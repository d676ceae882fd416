"""Stream processors SIGKILLed under load: no turn lost, none answered twice, Cassandra = the log's projection.

Several conversations post turns concurrently over HTTP/SSE while the context
builder, the router and the materializer are each killed (no goodbye: no
LeaveGroup, no last commit) and started again. Kafka redelivers what they had
not committed; the group hands their partitions on after the session timeout
(PARLEY_STREAMS_SESSION_TIMEOUT_S, short here). No timing assertions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.audit_sources import run_audit
from tools.client import ParleyClient, Reply
from tools.supervisor import Child
from tools.topology import CONTEXT, ENGINE, GATEWAY, MATERIALIZER, ROUTER, WORKER_SMALL, Service

CONVERSATIONS = 6
TURNS = 4
TURN_DEADLINE_S = 150.0  # a turn stuck this long is lost (the test fails, it does not hang)
KILLED = (CONTEXT, ROUTER, MATERIALIZER)

ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "50",
    "PARLEY_ENGINE_TOKENS_PER_S": "60",  # ~0.6 s a reply: kills land mid-turn
    "PARLEY_CONTEXT_MAX_TOKENS": "30",
    "PARLEY_ROUTER_POOLS": "small=test-small",
    "PARLEY_STREAMS_SESSION_TIMEOUT_S": "6",
}


@dataclass
class CrashStack:
    inner: isolated.IsolatedStack
    key: str

    def child(self, service: Service) -> Child:
        return next(c for c in reversed(self.inner.supervisor.children) if c.service.name == service.name)

    def kill_and_restart(self, service: Service) -> None:
        child = self.child(service)
        child.process.kill()  # SIGKILL
        child.process.wait(30)
        again = self.inner.supervisor.start(service)
        self.inner.supervisor.wait_ready(again)


@pytest.fixture(scope="module")
def crash_stack(infra, tmp_path_factory) -> Iterator[CrashStack]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "crash")
    services = (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, MATERIALIZER, GATEWAY)
    try:
        inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("crash-logs"), ENV, services=services)
    except BaseException:
        isolated.drop(kafka, cassandra)
        raise
    try:
        yield CrashStack(inner, inner.create_user("crash", "enterprise")[1])
    finally:
        inner.stop()
        isolated.drop(kafka, cassandra)


async def converse(client: ParleyClient, cid: str, n: int) -> list[Reply]:
    """``n`` turns, each waited for; a turn that ends with neither done nor error within the deadline fails."""
    replies = []
    for i in range(n):
        reply = await asyncio.wait_for(
            client.send(cid, f"turn {i} of {cid}: tell me more", client_message_id=uuid.uuid4().hex), TURN_DEADLINE_S
        )
        replies.append(reply)
    return replies


async def chaos(stack: CrashStack, stop: asyncio.Event) -> list[str]:
    """Kill each processor in turn while the load runs (twice round if the load lasts)."""
    killed = []
    for service in KILLED * 2:
        await asyncio.sleep(1.5)
        if stop.is_set() and len(killed) >= len(KILLED):
            break
        await asyncio.to_thread(stack.kill_and_restart, service)
        killed.append(service.name)
    return killed


async def test_turns_survive_processor_crashes_once_each_and_the_tables_match_the_log(crash_stack: CrashStack) -> None:
    clients = [ParleyClient(crash_stack.inner.url, crash_stack.key, timeout=TURN_DEADLINE_S) for _ in range(CONVERSATIONS)]
    try:
        cids = [await c.create_conversation(f"crash {i}") for i, c in enumerate(clients)]
        stop = asyncio.Event()
        killer = asyncio.create_task(chaos(crash_stack, stop))
        results = await asyncio.gather(*(converse(c, cid, TURNS) for c, cid in zip(clients, cids)))
        stop.set()
        killed = await killer
        assert set(killed) == {s.name for s in KILLED}

        replies = [r for turns in results for r in turns]
        assert len(replies) == CONVERSATIONS * TURNS
        for reply in replies:  # no turn lost: each ended, with a reply or a clear error
            assert reply.head.get("reply_id"), reply.events[:1]
            assert reply.final is not None, f"turn {reply.head} never ended"
            if reply.final.event == "error":
                assert reply.final.data.get("code"), reply.final.data

        report, undecodable = await asyncio.to_thread(run_audit, crash_stack.inner.kafka, crash_stack.inner.cassandra, 90.0)
        print(f"\nkilled {killed}; turns {report.turns.finished}, re-appended completions {report.turns.reappended}, rows {report.rows_found}")
        assert undecodable == 0
        assert report.turns.requested == len(replies)
        assert report.turns.in_flight == [], "every turn the log asked for ended on the log"
        assert report.duplicates == 0, report.turns
        assert (report.missing, report.extra, report.differing) == ([], [], [])
        assert report.ok(lost_ok=False)

        # None answered twice: what streamed is what was stored, once.
        for client, cid, turns in zip(clients, cids, results):
            stored = {m["id"]: m for m in (await client.conversation(cid))["messages"]}
            for reply in turns:
                if reply.final.event == "done":
                    assert stored[reply.head["reply_id"]]["content"] == reply.text
    finally:
        for c in clients:
            await c.close()
