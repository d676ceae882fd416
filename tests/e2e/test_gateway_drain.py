"""A gateway drains on SIGTERM: unready at once, new turns 503 + Retry-After, replies in flight
finish (or, past PARLEY_GATEWAY_DRAIN_S, are told to resume elsewhere and do, on another
gateway, from their Last-Event-ID), then the process exits 0.

Its own stack (topics, keyspace) on the shared Kafka and Cassandra, with a slow engine so a
reply is still streaming when the signal comes. Real processes and HTTP; deadlines, no timings.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.client import ApiError, ParleyClient, SseEvent, parse_sse
from tools.supervisor import Child
from tools.topology import CHAT_PATH, GATEWAY

DEADLINE = 60.0
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "10",  # a reply of 40 tokens streams for about 4 s
    "PARLEY_CONTEXT_MAX_TOKENS": "40",
    "PARLEY_GATEWAY_RETRY_AFTER_S": "2",
    "PARLEY_GATEWAY_DRAIN_S": "30",
}


@pytest.fixture(scope="module")
def drain_stack(infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[isolated.IsolatedStack]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "drain")
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("drain-logs"), ENV, CHAT_PATH)
    try:
        yield inner
    finally:
        inner.stop()
        inner.session.cluster.shutdown()  # type: ignore[attr-defined]
        isolated.drop(kafka, cassandra)


def gateway(stack: isolated.IsolatedStack, name: str, drain_s: float) -> tuple[Child, str]:
    """Another gateway process on the stack, on a free port; (its child, its URL)."""
    port = isolated.free_port()
    env = {"PARLEY_GATEWAY_PORT": str(port), "PARLEY_GATEWAY_DRAIN_S": str(drain_s)}
    child = stack.supervisor.start(GATEWAY, name=name, extra_env=env, ports={"gateway_port": port})
    stack.supervisor.wait_ready(child)
    return child, f"http://127.0.0.1:{port}"


async def read_until_deltas(events: Any, out: list[SseEvent], n: int) -> None:
    async for event in events:
        out.append(event)
        if sum(e.event == "delta" for e in out) >= n or event.event in ("done", "error"):
            return


async def drain_observed(url: str, key: str, cid: str) -> tuple[dict[str, Any], ApiError]:
    """/readyz while draining, and the refusal of a new turn (polled: the signal takes a moment)."""
    deadline = time.monotonic() + DEADLINE
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        while True:
            ready = await http.get("/readyz")
            if ready.status_code == 503 and ready.json().get("draining"):
                health = await http.get("/health")  # what vLLM and SGLang call it, for serving benchmarks
                assert (health.status_code, health.json()["draining"]) == (503, True)
                break
            assert time.monotonic() < deadline, "/readyz never turned false after SIGTERM"
            await asyncio.sleep(0.05)
    client = ParleyClient(url, key, timeout=30)
    try:
        await client.send(cid, "a new turn while draining")
    except ApiError as exc:
        return ready.json(), exc
    finally:
        await client.close()
    pytest.fail("a new turn was accepted by a draining gateway")


def exit_code(child: Child) -> int:
    return child.process.wait(DEADLINE)


async def test_sigterm_mid_stream_refuses_new_turns_lets_the_reply_finish_and_exits_0(drain_stack) -> None:
    child, url = gateway(drain_stack, "gateway-drain", drain_s=30)
    _, key = drain_stack.create_user("drain-user", "plus")
    client = ParleyClient(url, key)
    try:
        cid = await client.create_conversation("drain")
        events: list[SseEvent] = []
        stream = client.stream_message(cid, "tell me a long story")
        await read_until_deltas(stream, events, 2)
        assert events[-1].event == "delta", events[-1]

        child.process.send_signal(signal.SIGTERM)
        ready, refused = await drain_observed(url, key, cid)
        assert ready["ready"] is False
        assert refused.status == 503 and refused.body["error"]["code"] == "gateway_draining", refused.body
        assert int(refused.headers["Retry-After"]) >= 1

        await read_until_deltas(stream, events, 10_000)  # the reply in flight carries on to its end
        assert events[-1].event == "done", events[-1]
        assert exit_code(child) == 0
    finally:
        await client.close()


async def test_past_the_deadline_a_stream_is_told_to_resume_elsewhere_and_does(drain_stack) -> None:
    leaving, url = gateway(drain_stack, "gateway-short-drain", drain_s=1)
    _, other_url = gateway(drain_stack, "gateway-other", drain_s=30)
    _, key = drain_stack.create_user("drain-user-2", "plus")
    client = ParleyClient(url, key)
    try:
        cid = await client.create_conversation("drain past the deadline")
        events: list[SseEvent] = []
        stream = client.stream_message(cid, "tell me a very long story")
        await read_until_deltas(stream, events, 1)
        leaving.process.send_signal(signal.SIGTERM)
        await read_until_deltas(stream, events, 10_000)
        cut = events[-1]
        assert cut.event == "error" and cut.data["code"] == "gateway_draining", cut
        assert cut.data["retry_after"] >= 1
        assert exit_code(leaving) == 0

        # The client reconnects elsewhere after the last cursor it holds, and the reply carries on.
        reply_id = events[0].data["reply_id"]
        last = next(e.id for e in reversed(events) if e.id)
        rest: list[SseEvent] = []
        async with httpx.AsyncClient(base_url=other_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            async with http.stream("GET", f"/v1/messages/{reply_id}/stream", headers={"Last-Event-ID": last}) as r:
                assert r.status_code == 200
                await read_until_deltas(parse_sse(r.aiter_lines()), rest, 10_000)
        assert rest[-1].event == "done", rest[-1]
        streamed = "".join(e.data["text"] for e in events + rest if e.event == "delta")

        other = ParleyClient(other_url, key)
        try:
            deadline = time.monotonic() + DEADLINE
            while True:
                stored = {m["id"]: m for m in (await other.conversation(cid))["messages"]}
                if stored.get(reply_id, {}).get("status") == "complete":
                    break
                assert time.monotonic() < deadline, "the reply was never stored"
                await asyncio.sleep(0.3)
        finally:
            await other.close()
        assert stored[reply_id]["content"] == streamed, "nothing lost or repeated across the two gateways"
    finally:
        await client.close()
