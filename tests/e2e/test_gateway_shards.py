"""Two sharded gateways behind the edge (PARLEY_GATEWAY_SHARD 0/2 and 1/2, `python -m edge`): a
conversation's streams go to the gateway that owns its chat.tokens partition, which then reads
nothing of the other's; a resume through the other gateway (a plain load balancer, another device)
still gets exactly the rest of the reply, borrowing the partition for a moment; a regenerate, whose
path names no conversation, reaches the owner through a 421; and when the owner stops, its
conversations go on through the next gateway, a reply in flight resumed there from its cursor.

Its own stack on the shared Kafka and Cassandra; real processes and HTTP; deadlines, no timings.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from parley.partitioning import partition_for
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.client import ParleyClient, SseEvent, parse_sse
from tools.topology import CONTEXT, ENGINE, GATEWAY, MATERIALIZER, ROUTER, WORKER_SMALL

DEADLINE = 60.0
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "20",  # a reply of 60 tokens streams for about 3 s: long enough to cut
    "PARLEY_CONTEXT_MAX_TOKENS": "60",
    "PARLEY_GATEWAY_DRAIN_S": "1",
    "PARLEY_GATEWAY_BORROWED_IDLE_S": "1",
}
#: What a turn needs, and no more: the suite has a time budget.
SERVICES = (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, MATERIALIZER, GATEWAY)


class Shards:
    def __init__(self, inner: isolated.IsolatedStack) -> None:
        self.inner = inner
        self.edge = inner.url
        self.gateways = inner.gateway_urls
        _, self.key = inner.create_user("shards-user", "enterprise")
        self.headers = {"Authorization": f"Bearer {self.key}"}
        # Each gateway's metrics server (its own port, never the API's), by the gateway's URL.
        self.metrics = {url: self.child(f"gateway-{i}").metrics_url.rsplit("/", 1)[0] for i, url in enumerate(self.gateways)}

    def client(self, url: str | None = None) -> ParleyClient:
        return ParleyClient(url or self.edge, self.key)

    def child(self, name: str) -> Any:
        return next(c for c in self.inner.supervisor.children if c.log.stem == name)


@pytest.fixture(scope="module")
def shards(infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shards]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "shards")
    try:
        inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("shards-logs"), ENV, SERVICES, gateways=2)
    except BaseException:
        isolated.drop(kafka, cassandra)
        raise
    try:
        yield Shards(inner)
    finally:
        inner.stop()
        isolated.drop(kafka, cassandra)


def owner(cid: str) -> int:
    return partition_for(cid, 12) % 2


def metric(url: str, name: str, **labels: str) -> float:
    """A sample of a process's /metrics, ``url`` its metrics server (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        series, _, value = line.rpartition(" ")
        if series == (f"{name}{{{want}}}" if labels else name):
            return float(value)
    return 0.0


def posts_served(shards: Shards, url: str) -> float:
    return metric(
        shards.metrics[url], "parley_http_requests_total", method="POST", route="/v1/conversations/{conversation_id}/messages",
        status="200",
    )


def borrowed(shards: Shards, url: str) -> float:
    return metric(shards.metrics[url], "parley_gateway_token_records_read_total", share="borrowed")


async def read(events: Any, out: list[SseEvent], deltas: int = 10_000) -> None:
    async for event in events:
        out.append(event)
        if sum(e.event == "delta" for e in out) >= deltas or event.event in ("done", "error"):
            return


async def stored_reply(client: ParleyClient, cid: str, reply_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    while True:
        messages = {m["id"]: m for m in (await client.conversation(cid))["messages"]}
        if messages.get(reply_id, {}).get("status") == "complete":
            return messages[reply_id]
        assert time.monotonic() < deadline, "the reply was never stored"
        await asyncio.sleep(0.3)


async def resume(url: str, key: str, reply_id: str, cursor: str) -> list[SseEvent]:
    rest: list[SseEvent] = []
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=DEADLINE) as http:
        async with http.stream("GET", f"/v1/messages/{reply_id}/stream", headers={"Last-Event-ID": cursor}) as r:
            assert r.status_code == 200, await r.aread()
            await read(parse_sse(r.aiter_lines()), rest)
    return rest


def text(events: list[SseEvent]) -> str:
    return "".join(e.data["text"] for e in events if e.event == "delta")


def cursors(events: list[SseEvent]) -> list[str]:
    return [e.id for e in events if e.event == "delta" and e.id]


async def test_new_conversations_live_on_the_gateway_that_made_them_and_their_turns_go_there(shards: Shards) -> None:
    client = shards.client()
    try:
        cids = [await client.create_conversation() for _ in range(4)]
        assert {owner(c) for c in cids} == {0, 1}, "round-robin creation, each minted on its creator's partitions"
        before = [posts_served(shards, g) for g in shards.gateways]
        for reply in await asyncio.gather(*(client.send(cid, "hello") for cid in cids)):
            assert reply.final is not None and reply.final.event == "done", reply.final
        after = [posts_served(shards, g) for g in shards.gateways]
        assert [a - b for a, b in zip(after, before)] == [sum(owner(c) == g for c in cids) for g in (0, 1)]
        assert [borrowed(shards, g) for g in shards.gateways] == [0.0, 0.0], "no gateway read a partition it does not own"
    finally:
        await client.close()


async def test_a_resume_through_the_other_gateway_gets_exactly_the_rest(shards: Shards) -> None:
    client = shards.client()
    try:
        cid = await client.create_conversation()
        other = shards.gateways[1 - owner(cid)]
        first: list[SseEvent] = []
        stream = client.stream_message(cid, "tell me a long story")
        await read(stream, first, 3)
        await stream.aclose()  # the device goes away mid-reply
        reply_id = first[0].data["reply_id"]
        rest = await resume(other, shards.key, reply_id, cursors(first)[-1])
        assert rest[-1].event == "done", rest[-1]
        seen = cursors(first) + cursors(rest)
        assert len(seen) == len(set(seen)), "no chunk twice"
        assert (await stored_reply(client, cid, reply_id))["content"] == text(first + rest), "none missing"
        assert borrowed(shards, other) > 0, "the other gateway borrowed the partition"

        await asyncio.sleep(1 + 1.5)  # PARLEY_GATEWAY_BORROWED_IDLE_S, and then some: given back
        held = borrowed(shards, other)
        assert (await client.send(cid, "and then?")).final.event == "done"  # type: ignore[union-attr]
        assert borrowed(shards, other) == held, "the borrowed partition was given back once its stream ended"
    finally:
        await client.close()


async def test_a_regenerate_reaches_the_owner_through_a_421(shards: Shards) -> None:
    client = shards.client()
    try:
        cid = await client.create_conversation()
        reply = await client.send(cid, "hello")
        reply_id = reply.head["reply_id"]
        await stored_reply(client, cid, reply_id)
        edge_metrics = shards.child("edge").metrics_url.rsplit("/", 1)[0]
        rerouted = metric(edge_metrics, "parley_edge_routes_total", how="rerouted")
        held = [borrowed(shards, g) for g in shards.gateways]
        async with httpx.AsyncClient(base_url=shards.edge, headers=shards.headers, timeout=DEADLINE) as http:
            for _ in range(2):  # round-robin: one of the two lands first on the gateway that does not own it
                body = {"client_message_id": uuid.uuid4().hex}
                events: list[SseEvent] = []
                async with http.stream("POST", f"/v1/messages/{reply_id}/regenerate", json=body) as r:
                    assert r.status_code == 200, await r.aread()
                    await read(parse_sse(r.aiter_lines()), events)
                assert events[-1].event == "done", events[-1]
        assert metric(edge_metrics, "parley_edge_routes_total", how="rerouted") == rerouted + 1
        assert [borrowed(shards, g) for g in shards.gateways] == held, "both regenerates streamed from the owner"
    finally:
        await client.close()


async def test_when_the_owner_stops_its_conversations_go_on_through_the_next_gateway(shards: Shards) -> None:
    client = shards.client()
    try:
        cid = await client.create_conversation()
        gone = owner(cid)
        first: list[SseEvent] = []
        stream = client.stream_message(cid, "tell me a long story")
        await read(stream, first, 2)
        leaving = shards.child(f"gateway-{gone}")
        shards.inner.supervisor.stop(leaving)  # SIGTERM: drains for PARLEY_GATEWAY_DRAIN_S, cuts the stream, exits
        await read(stream, first)
        cut = first[-1]
        assert cut.event == "error" and cut.data["code"] == "gateway_draining", cut
        reply_id = first[0].data["reply_id"]
        rest = await resume(shards.edge, shards.key, reply_id, next(e.id for e in reversed(first) if e.id))  # type: ignore[arg-type]
        assert rest[-1].event == "done", rest[-1]
        assert (await stored_reply(client, cid, reply_id))["content"] == text(first + rest)

        after = await client.send(cid, "still there?")  # a new turn: the next gateway in the ring takes it
        assert after.final is not None and after.final.event == "done", after.final
        assert borrowed(shards, shards.gateways[1 - gone]) > 0
    finally:
        await client.close()
