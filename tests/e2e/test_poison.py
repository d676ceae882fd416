"""Poison on every consumed topic, with every service running (DESIGN.md §4): a record that is not
Avro, one of an unknown schema fingerprint, a truncated body and one over 512 KiB, each put where a
good event follows it. Consumer-group members send each to ``<topic>.dlq`` as a DeadLetter (source
topic/partition/offset, error) and carry on: their committed offsets pass the poison and the good
traffic behind it is processed. Readers outside any group, which every instance runs (heartbeats,
memory, cancels, the gateway's token reader), log and skip instead, since N instances would
dead-letter N copies (parley/consumer.py ``read_events``, workers/control.py); they carry on too.

The module's own stack; its engine is slow enough (20 tokens/s) that a reply is still streaming
when poison lands on chat.tokens mid-reply, and when it is stopped.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from parley.consumer import DEFAULT_MAX_EVENT_BYTES, poll_batch
from parley.partitioning import partition_for
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import POOLS, TOPICS
from schemas.events import DeadLetter, GenerationCancelRequested, InferenceRequested, TokenChunk
from tools import isolated
from tools.client import ParleyClient
from tools.topology import SERVICES

DEADLINE = 120.0
POISON_ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "50",
    "PARLEY_ENGINE_TOKENS_PER_S": "20",
    "PARLEY_CONTEXT_MAX_TOKENS": "160",
}

#: Who dead-letters each consumed topic (consumer groups, by the processor that names them) ...
DEAD_LETTERED_BY: dict[str, tuple[str, ...]] = {
    "chat.events": ("streams.context", "streams.materializer", "streams.moderation", "streams.tools", "streams.search"),
    "chat.tools": ("tools",),  # the tool executor's group
    "chat.inference": ("streams.router",),
    **{f"chat.inference.{pool}": (f"workers.{pool}",) for pool in POOLS},
    "chat.tokens": ("streams.materializer", "streams.moderation"),  # the checkpoints agent; the reply's windows
    "user.memory": ("streams.materializer",),
    "chat.usage": ("streams.usage",),
    "docs.events": ("streams.materializer", "documents"),  # the status rows; the document worker's jobs
    "user.erasures": ("streams.erasure",),
    "chat.control": (),
    "fleet.heartbeats": (),
    "ops.experiments": (),
}
#: ... and which group-less readers skip it (service log names): every instance reads every record.
SKIPPED_BY: dict[str, tuple[tuple[str, str], ...]] = {
    "chat.tokens": (("gateway", "skipping an undecodable token record"),),
    "user.memory": (("context", "undecodable memory record skipped"),),
    "chat.control": tuple((f"worker-{pool}", "undecodable control record skipped") for pool in POOLS),
    "fleet.heartbeats": (("router", "undecodable heartbeat record skipped"), ("gateway", "undecodable heartbeat record skipped")),
    "ops.experiments": (("gateway", "undecodable experiment record skipped"),),
}
#: The error_type a dead letter gives each kind of poison.
KINDS = {"not_avro": "undecodable", "unknown_fingerprint": "unknown_schema", "truncated": "undecodable", "oversize": "oversize"}


def poison_values() -> dict[str, bytes]:
    good = codec.encode(GenerationCancelRequested(conversation_id=str(uuid.uuid4()), user_id="poison", request_id=str(uuid.uuid4()), reason="user"))
    # A valid event, too large to read: only the size check can refuse it.
    huge = codec.encode(TokenChunk(conversation_id=str(uuid.uuid4()), user_id="poison", request_id=str(uuid.uuid4()), seq=0, text="x" * (DEFAULT_MAX_EVENT_BYTES + 1024)))
    return {
        "not_avro": b"\x00this is not avro",
        "unknown_fingerprint": b"\xc3\x01" + bytes.fromhex("deadbeefdeadbeef") + b"\x02hi",
        "truncated": good[: len(good) // 2],
        "oversize": huge,
    }


@dataclass(frozen=True)
class Placed:
    topic: str  # catalog name
    partition: int
    offset: int
    kind: str


@dataclass
class Poisoned:
    stack: isolated.IsolatedStack
    placed: list[Placed] = field(default_factory=list)
    replies: dict[str, dict] = field(default_factory=dict)  # pool → what its turn showed
    memory_fact: str = ""
    prompts_with_fact: int = 0
    document: dict = field(default_factory=dict)  # an upload after docs.events' poison, as it ended

    def on(self, topic: str) -> list[Placed]:
        return [p for p in self.placed if p.topic == topic]


def _put(stack: isolated.IsolatedStack, topic: str, partitions: set[int], key: bytes) -> list[Placed]:
    """Every kind of poison on each of ``partitions`` of ``topic``, acknowledged."""
    producer = Producer({"bootstrap.servers": stack.kafka.bootstrap, "message.max.bytes": 2 * DEFAULT_MAX_EVENT_BYTES})
    placed: list[Placed] = []
    errors: list[str] = []

    def delivered(kind: str) -> Callable:
        def report(err, msg) -> None:  # noqa: ANN001
            if err is not None:
                errors.append(str(err))
            else:
                placed.append(Placed(topic, msg.partition(), msg.offset(), kind))

        return report

    for partition in sorted(partitions):
        for kind, value in poison_values().items():
            producer.produce(stack.kafka.topic(topic), value=value, key=key, partition=partition, on_delivery=delivered(kind))
    assert producer.flush(30) == 0 and not errors, errors
    return placed


def _read(kafka: KafkaSettings, topic: str, done: Callable[[list], bool], what: str) -> list:
    """Decoded events of ``topic`` (every partition, from the start) until ``done`` holds."""
    name = kafka.topic(topic)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"poison-{uuid.uuid4().hex[:6]}"})
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS[topic].partitions)])
    events: list = []
    deadline = time.monotonic() + DEADLINE
    try:
        while not done(events):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for msg in poll_batch(consumer, 500, 0.5):
                if not msg.error() and msg.value() is not None:
                    try:
                        events.append(codec.decode(msg.value()))
                    except codec.CodecError:
                        pass  # the poison itself
        return events
    finally:
        consumer.close()


async def _turn(poisoned: Poisoned, client: ParleyClient, http: httpx.AsyncClient, cid: str, pool: str) -> None:
    """A turn on ``pool``: poison lands on chat.tokens mid-reply; the reply must stream past it, then stop."""
    stack = poisoned.stack
    seen: dict = {"deltas_after_poison": 0, "events": []}
    tokens_poison: list[Placed] = []
    async for event in client.stream_message(cid, f"Tell me a long story ({pool})", model=pool):
        seen["events"].append(event.event)
        if event.event == "message":
            seen["reply_id"] = event.data["reply_id"]
        if event.event == "delta" and not tokens_poison:
            partition = partition_for(cid, TOPICS["chat.tokens"].partitions)
            tokens_poison = await asyncio.to_thread(_put, stack, "chat.tokens", {partition}, cid.encode())
            poisoned.placed.extend(tokens_poison)
        elif event.event == "delta" and event.id and int(event.id.split(":")[1]) > max(p.offset for p in tokens_poison):
            seen["deltas_after_poison"] += 1
            if seen["deltas_after_poison"] == 2:  # the gateway read past the poison: now stop it
                r = await http.post(f"/v1/messages/{seen['reply_id']}/stop")
                assert r.status_code == 200, r.text
        if event.event in ("done", "error"):
            seen["final"] = event.data
    poisoned.replies[pool] = seen


async def _traffic(poisoned: Poisoned, key: str, user_id: str) -> None:
    stack = poisoned.stack
    client = ParleyClient(stack.url, key)
    http = httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    try:
        cids = {pool: await client.create_conversation(f"poison {pool}") for pool in POOLS}
        keys = {pool: cid.encode() for pool, cid in cids.items()}
        for topic in ("chat.events", "chat.inference", "chat.control"):
            for pool, cid in cids.items():
                poisoned.placed += _put(stack, topic, {partition_for(cid, TOPICS[topic].partitions)}, keys[pool])
        for pool in POOLS:  # the router picks the partition: poison them all
            topic = f"chat.inference.{pool}"
            poisoned.placed += _put(stack, topic, set(range(TOPICS[topic].partitions)), keys[pool])
        poisoned.placed += _put(stack, "fleet.heartbeats", {0}, b"poison")
        poisoned.placed += _put(stack, "ops.experiments", {0}, b"poison")  # the gateways' reader of the running set
        for topic in ("user.memory", "chat.usage"):  # keyed by user
            poisoned.placed += _put(stack, topic, {partition_for(user_id, TOPICS[topic].partitions)}, user_id.encode())
        # Keyed by a document id the gateway mints: poison every partition, so the upload below meets it.
        poisoned.placed += _put(stack, "docs.events", set(range(TOPICS["docs.events"].partitions)), b"poison")
        # The erasure processor's: every partition (its committed offset past the poison is its going on).
        poisoned.placed += _put(stack, "user.erasures", set(range(TOPICS["user.erasures"].partitions)), b"poison")
        # The tool executor's queue: every partition.
        poisoned.placed += _put(stack, "chat.tools", set(range(TOPICS["chat.tools"].partitions)), b"poison")

        poisoned.memory_fact = f"I keep {uuid.uuid4().hex[:8]} bees"
        r = await http.put("/v1/memory", json={"facts": [poisoned.memory_fact]})
        assert r.status_code == 200, r.text
        for pool in POOLS:
            await _turn(poisoned, client, http, cids[pool], pool)
        # The context builder's memory reader went past its poison: a later prompt carries the fact.
        for attempt in range(10):
            reply = await client.send(cids["small"], f"What do I keep? ({attempt})", model="small")
            rid = reply.head["reply_id"]
            prompts = _read(stack.kafka, "chat.inference", lambda evs: any(_is(e, rid) for e in evs), "the prompt of a later turn")
            if any(poisoned.memory_fact in m.content for e in prompts if _is(e, rid) for m in e.messages):
                poisoned.prompts_with_fact += 1
                break
            await asyncio.sleep(1.0)
        # The document worker and the materializer read past docs.events' poison: an upload is indexed and shown.
        uploaded = await client.upload("after-poison.txt", b"A page written after the poison.", "text/plain")
        poisoned.document = await client.until_processed(uploaded["id"], timeout_s=DEADLINE)
        # The materializer stored each stopped reply as cancelled.
        for pool, seen in poisoned.replies.items():
            deadline = time.monotonic() + DEADLINE
            while True:
                conv = await client.conversation(cids[pool])
                row = next((m for m in conv["messages"] if m["id"] == seen.get("reply_id")), None)
                if row is not None and row["status"] not in (None, "streaming"):
                    seen["stored_status"] = row["status"]
                    break
                assert time.monotonic() < deadline, f"the {pool} reply was never stored as finished"
                await asyncio.sleep(0.3)
    finally:
        await client.close()
        await http.aclose()


def _is(event: object, request_id: str) -> bool:
    return isinstance(event, InferenceRequested) and event.request_id == request_id


@pytest.fixture(scope="module")
def poisoned(infra, tmp_path_factory) -> Iterator[Poisoned]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "e2epoison")
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("poison-logs"), POISON_ENV)
    try:
        user_id, key = inner.create_user("poison", "plus")
        result = Poisoned(inner)
        asyncio.run(_traffic(result, key, user_id))
        yield result
    finally:
        inner.stop()
        isolated.drop(kafka, cassandra)


def _consumed_topics() -> set[str]:
    topics = {t for service in SERVICES for t in service.consumes}
    return topics | {"user.memory"}  # the context builder reads it whole besides its group (streams/memory.py)


def test_the_table_names_every_consumed_topic() -> None:
    assert set(DEAD_LETTERED_BY) == _consumed_topics()
    assert set(SKIPPED_BY) | {t for t, groups in DEAD_LETTERED_BY.items() if groups} == _consumed_topics()


def _dead_letters(poisoned: Poisoned, topic: str, groups: tuple[str, ...]) -> list[DeadLetter]:
    wanted = {(p.partition, p.offset) for p in poisoned.on(topic)}
    source = poisoned.stack.kafka.topic(topic)

    def mine(events: list) -> list[DeadLetter]:
        return [e for e in events if isinstance(e, DeadLetter) and e.source_topic == source and (e.source_partition, e.source_offset) in wanted]

    def complete(events: list) -> bool:
        got = {(e.consumer, e.source_partition, e.source_offset) for e in mine(events)}
        return all(any(c.endswith(g) and (p, o) == w for c, p, o in got) for g in groups for w in wanted)

    return mine(_read(poisoned.stack.kafka, f"{topic}.dlq", complete, f"dead letters of {topic} from {groups}"))


def _committed(kafka: KafkaSettings, group: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(kafka.topic(topic), partition)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def _skipped(log: Path, message: str) -> tuple[set[tuple[int, int]], int]:
    """(partition, offset) of each record ``log`` says was skipped, and how many skips it logged in all
    (faust's processes write their own text lines, without the record's position)."""
    where, count = set(), 0
    for line in log.read_text(errors="replace").splitlines():
        if message not in line:
            continue
        count += 1
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("msg") == message:
            where.add((record.get("partition"), record.get("offset")))
    return where, count


def _skipped_all(log: Path, message: str, wanted: set[tuple[int, int]]) -> bool:
    where, count = _skipped(log, message)
    return wanted <= where or (not where and count >= len(wanted))


@pytest.mark.parametrize("topic", sorted(DEAD_LETTERED_BY))
def test_poison_on_a_consumed_topic_is_dead_lettered_or_skipped_and_consumption_goes_on(poisoned: Poisoned, topic: str) -> None:
    placed = poisoned.on(topic)
    assert {p.kind for p in placed} == set(KINDS), "every kind of poison was put on the topic"
    # Consumption went on behind the poison: every turn streamed past it to a stop, and was stored.
    for pool, seen in poisoned.replies.items():
        assert seen["deltas_after_poison"] >= 2, (pool, seen["events"])
        assert seen["final"]["finish_reason"] == "cancelled", (pool, seen)  # chat.control read past its poison
        assert seen["stored_status"] == "cancelled", (pool, seen)
    assert poisoned.prompts_with_fact, "a prompt after the poisoned user.memory carries the new fact"
    assert poisoned.document.get("status") == "ready", poisoned.document  # docs.events read past its poison

    groups = DEAD_LETTERED_BY[topic]
    if groups:
        letters = _dead_letters(poisoned, topic, groups)
        for group in groups:
            for p in placed:
                got = [l for l in letters if l.consumer.endswith(group) and (l.source_partition, l.source_offset) == (p.partition, p.offset)]
                assert got, f"{group} did not dead-letter the {p.kind} record at {topic}[{p.partition}]@{p.offset}"
                assert got[0].error_type == KINDS[p.kind], (p, got[0].error_type, got[0].error)
                assert got[0].error and got[0].raw_value is not None
            consumer = next(l.consumer for l in letters if l.consumer.endswith(group))
            for partition in {p.partition for p in placed}:
                last = max(p.offset for p in placed if p.partition == partition)
                deadline = time.monotonic() + DEADLINE
                while _committed(poisoned.stack.kafka, consumer, topic, partition) <= last:
                    assert time.monotonic() < deadline, f"{consumer} never committed past the poison on {topic}[{partition}]"
                    time.sleep(0.5)
    for service, message in SKIPPED_BY.get(topic, ()):
        log = poisoned.stack.supervisor.log_dir / f"{service}.log"
        wanted = {(p.partition, p.offset) for p in placed}
        deadline = time.monotonic() + DEADLINE
        while not _skipped_all(log, message, wanted):
            assert time.monotonic() < deadline, f"{service} did not log skipping {sorted(wanted)} of {topic}: {_skipped(log, message)}"
            time.sleep(0.5)
    assert all(child.process.poll() is None for child in poisoned.stack.supervisor.children), "a service died of the poison"
