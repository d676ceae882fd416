"""The inference worker against the real Kafka, driving the in-memory engine (workers/scripted.py).

One worker runs for the whole module, in-process, in group ``workers.small``;
each test produces InferenceRouted events to its own partition and reads what
the worker wrote to chat.tokens, chat.events, chat.usage and fleet.heartbeats.
Every wait is for a state (an event, a committed offset) with a deadline.
"""

from __future__ import annotations

from workers.generation import REPLY_MAX_BYTES

import asyncio
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client import REGISTRY

from parley.kafka import EventProducer
from parley.settings import KafkaSettings
from parley.consumer import watermarks
from schemas import codec
from schemas.events import (
    Event,
    GenerationCancelRequested,
    GenerationCompleted,
    InferenceRequested,
    InferenceRouted,
    PromptMessage,
    TokenChunk,
    UsageRecorded,
    WorkerHeartbeat,
)
from workers.scripted import ScriptedEngine, scripted_reply
from workers.settings import WorkerSettings
from workers.worker import run_worker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

INFERENCE = "chat.inference.small"


@dataclass
class Seen:
    event: Event
    partition: int
    offset: int
    timestamp: int  # producer CreateTime, ms


@dataclass
class Running:
    settings: WorkerSettings
    engine: ScriptedEngine
    producer: EventProducer
    stop: asyncio.Event
    task: asyncio.Task[None]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(kafka: KafkaSettings) -> AsyncIterator[Running]:
    settings = WorkerSettings(
        pool="small", worker_id=f"it-{uuid.uuid4().hex[:6]}", heartbeat_s=0.5, max_concurrency=8, max_queued=2
    )
    engine = ScriptedEngine(model="scripted-it")
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, kafka, engine=engine, stop=stop))
    producer = EventProducer(kafka)
    running = Running(settings, engine, producer, stop, task)
    try:
        yield running
    finally:
        stop.set()
        engine.release()
        await asyncio.wait_for(task, 90)  # re-raises whatever ended run_worker badly
        producer.close()


# ------------------------------------------------------------------ helpers


def routed(content: str, *, partition: int, max_tokens: int = 256) -> InferenceRouted:
    request_id = str(uuid.uuid4())
    cid = str(uuid.uuid4())
    request = InferenceRequested(
        conversation_id=cid,
        user_id="u-it",
        request_id=request_id,
        parent_id=str(uuid.uuid4()),
        messages=[PromptMessage(role="user", content=content)],
        max_tokens=max_tokens,
    )
    return InferenceRouted(
        conversation_id=cid, user_id="u-it", request=request, pool="small", model="pool-small", partition=partition
    )


async def submit(w: Running, r: InferenceRouted) -> int:
    """Produce ``r`` to the partition the router chose; returns its offset."""
    return (await w.producer.send(r, partition=r.partition)).offset


def _read(kafka: KafkaSettings, topic: str, done: Callable[[list[Seen]], bool], timeout: float) -> list[Seen]:
    name = kafka.topic(topic)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"it-read-{uuid.uuid4().hex}"})
    try:
        parts = consumer.list_topics(name, timeout=10).topics[name].partitions
        consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in parts])
        seen: list[Seen] = []
        deadline = time.monotonic() + timeout
        while not done(seen):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: the expected events did not arrive within {timeout}s")
            for msg in consumer.consume(200, 0.2):
                if not msg.error():
                    seen.append(Seen(codec.decode(msg.value()), msg.partition(), msg.offset(), msg.timestamp()[1]))
        return seen
    finally:
        consumer.close()


async def read(
    kafka: KafkaSettings, topic: str, done: Callable[[list[Seen]], bool], timeout: float = 30
) -> list[Seen]:
    # In a thread: the worker runs on this event loop and must keep running while we wait.
    return await asyncio.to_thread(_read, kafka, topic, done, timeout)


def of(request_id: str, kind: type[Event]) -> Callable[[list[Seen]], list[Seen]]:
    return lambda seen: [s for s in seen if isinstance(s.event, kind) and getattr(s.event, "request_id") == request_id]


async def closing_events(kafka: KafkaSettings, request_id: str) -> tuple[GenerationCompleted, list[TokenChunk]]:
    """The request's GenerationCompleted and all its chunks, once the final chunk is there."""
    chunks_of = of(request_id, TokenChunk)
    tokens = await read(kafka, "chat.tokens", lambda seen: any(s.event.finish_reason for s in chunks_of(seen)))
    completed_of = of(request_id, GenerationCompleted)
    events = await read(kafka, "chat.events", lambda seen: bool(completed_of(seen)))
    chunks = sorted((s.event for s in chunks_of(tokens)), key=lambda c: c.seq)  # type: ignore[attr-defined]
    return completed_of(events)[0].event, chunks  # type: ignore[return-value]


def committed(kafka: KafkaSettings, group: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})  # asks; never joins
    try:
        (tp,) = consumer.committed([TopicPartition(kafka.topic(INFERENCE), partition)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


async def until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# ------------------------------------------------------------------ tests


async def test_a_reply_streams_coalesced_chunks_and_lands_on_chat_events_before_its_last_chunk(
    worker: Running, kafka: KafkaSettings
) -> None:
    r = routed("[[tokens:60]][[step_ms:1]] tell me", partition=0)
    rid = r.request.request_id
    committed_before = REGISTRY.get_sample_value("parley_worker_transactions_total", {"outcome": "committed"}) or 0.0
    await submit(worker, r)

    # Read chat.tokens until the final chunk; at that moment note how far chat.events reaches.
    def _final_then_watermarks() -> tuple[list[Seen], dict[int, int]]:
        seen = _read(kafka, "chat.tokens", lambda s: any(x.event.finish_reason for x in of(rid, TokenChunk)(s)), 30)
        probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"it-probe-{uuid.uuid4().hex}"})
        try:
            topic = kafka.topic("chat.events")
            highs = {p: watermarks(probe, TopicPartition(topic, p), 10)[1] for p in range(12)}
        finally:
            probe.close()
        return seen, highs

    tokens, events_high_at_final = await asyncio.to_thread(_final_then_watermarks)
    chunk_seen = sorted(of(rid, TokenChunk)(tokens), key=lambda s: s.event.seq)  # type: ignore[attr-defined]
    chunks: list[TokenChunk] = [s.event for s in chunk_seen]  # type: ignore[misc]
    *stream, final = chunks

    assert stream[0].text == "tok0 " and stream[0].tokens == 1  # the first token goes out alone, at once
    assert 2 <= len(stream) < 60 and all(c.tokens <= 32 for c in stream)  # coalesced, never above the 32-token default
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert "".join(c.text for c in stream) == scripted_reply(60)
    assert [c.offset_chars for c in stream] == [sum(len(c.text) for c in stream[:i]) for i in range(len(stream))]
    assert final.finish_reason == "stop" and final.text == "" and final.usage and final.usage.completion_tokens == 60
    assert {s.partition for s in chunk_seen} == {chunk_seen[0].partition}  # keyed by conversation: one partition

    events = await read(kafka, "chat.events", lambda s: bool(of(rid, GenerationCompleted)(s)))
    (completed_seen,) = of(rid, GenerationCompleted)(events)
    completed: GenerationCompleted = completed_seen.event  # type: ignore[assignment]
    assert (completed.finish_reason, completed.content) == ("stop", scripted_reply(60))
    assert (completed.pool, completed.model, completed.replica) == ("small", "scripted-it", worker.settings.worker_id)
    # GenerationCompleted was on chat.events (acknowledged) when the final chunk could be read.
    assert completed_seen.offset < events_high_at_final[completed_seen.partition]
    assert completed_seen.timestamp <= chunk_seen[-1].timestamp

    usage_seen = await read(kafka, "chat.usage", lambda s: bool(of(rid, UsageRecorded)(s)))
    (u,) = of(rid, UsageRecorded)(usage_seen)
    recorded: UsageRecorded = u.event  # type: ignore[assignment]
    assert recorded.usage == final.usage == completed.usage
    assert recorded.finish_reason == "stop" and recorded.queue_ms >= 0 and recorded.duration_ms >= recorded.ttft_ms
    assert u.timestamp <= chunk_seen[-1].timestamp  # committed with the completion, before the final chunk
    # …in a transaction the worker counts (parley_worker_transactions_total, docs/operations.md).
    assert (REGISTRY.get_sample_value("parley_worker_transactions_total", {"outcome": "committed"}) or 0.0) > committed_before


async def test_the_group_commits_only_below_a_request_still_running(worker: Running, kafka: KafkaSettings) -> None:
    group = kafka.topic_prefix + worker.settings.group  # workers join their group under the topic prefix
    slow = routed("[[tokens:20]][[hold:3]]", partition=5)
    fast = routed("[[tokens:2]]", partition=5)
    slow_offset = await submit(worker, slow)
    fast_offset = await submit(worker, fast)
    assert fast_offset == slow_offset + 1

    completed, _ = await closing_events(kafka, fast.request.request_id)
    assert completed.finish_reason == "stop"
    assert f"{slow.request.request_id}:0" in worker.engine.holding
    await asyncio.sleep(2.5)  # room for the worker's auto-commits (every 1 s) to go wrong
    assert await asyncio.to_thread(committed, kafka, group, 5) <= slow_offset  # never past the running one

    worker.engine.release()
    await closing_events(kafka, slow.request.request_id)
    await until(lambda: committed(kafka, group, 5) == fast_offset + 1, "the commit to pass both requests")


async def test_a_cancel_mid_stream_closes_the_reply_as_cancelled_with_its_partial_text(
    worker: Running, kafka: KafkaSettings
) -> None:
    r = routed("[[tokens:50]][[hold:4]]", partition=1)
    rid = r.request.request_id
    await submit(worker, r)
    await until(lambda: f"{rid}:0" in worker.engine.holding, "the generation to be mid-stream")
    cancel = GenerationCancelRequested(
        conversation_id=r.conversation_id, user_id="u-it", request_id=rid, reason="user"
    )
    await worker.producer.send(cancel)

    completed, chunks = await closing_events(kafka, rid)
    assert (completed.finish_reason, completed.content) == ("cancelled", scripted_reply(4))
    assert chunks[-1].finish_reason == "cancelled" and chunks[-1].error_code is None
    assert "".join(c.text for c in chunks) == completed.content
    assert f"{rid}:0" in worker.engine.aborted


async def test_a_cancel_that_arrives_before_its_request_is_honoured(worker: Running, kafka: KafkaSettings) -> None:
    r = routed("[[tokens:5]]", partition=3)
    rid = r.request.request_id
    await worker.producer.send(
        GenerationCancelRequested(conversation_id=r.conversation_id, user_id="u-it", request_id=rid, reason="user")
    )
    await asyncio.sleep(1.0)  # let the control listener see it first, as when the request is delayed
    await submit(worker, r)
    completed, chunks = await closing_events(kafka, rid)
    assert (completed.finish_reason, completed.content) == ("cancelled", "")
    assert [c.finish_reason for c in chunks] == ["cancelled"]
    assert all(req.rid != f"{rid}:0" for req in worker.engine.requests)  # the engine never saw it


async def test_engine_failures_close_as_failed_and_the_worker_goes_on(worker: Running, kafka: KafkaSettings) -> None:
    down = routed("[[fail:unavailable]]", partition=2)
    broken = routed("[[tokens:8]][[fail:midstream]]", partition=2)
    after = routed("[[tokens:3]]", partition=2)
    for r in (down, broken, after):
        await submit(worker, r)

    completed, chunks = await closing_events(kafka, down.request.request_id)
    assert (completed.finish_reason, completed.error_code) == ("failed", "engine_unavailable")
    assert completed.error_message and chunks[-1].error_code == "engine_unavailable"
    assert chunks[-1].error_message == completed.error_message

    completed, chunks = await closing_events(kafka, broken.request.request_id)
    assert (completed.finish_reason, completed.error_code) == ("failed", "engine_failed")
    assert completed.content == scripted_reply(4) == "".join(c.text for c in chunks)

    completed, _ = await closing_events(kafka, after.request.request_id)
    assert completed.finish_reason == "stop" and completed.content == scripted_reply(3)


async def test_a_reply_too_large_for_the_log_ends_at_its_byte_bound_and_the_worker_goes_on(
    worker: Running, kafka: KafkaSettings
) -> None:
    """1.1 MB of text would make a GenerationCompleted no consumer reads (over 512 KiB; over librdkafka's
    message.max.bytes, refused for good, before the bound): the reply ends ``length`` at
    ``REPLY_MAX_BYTES``, its completion readable and its stream whole; closings after it commit."""
    tokens = 120_000  # "tok0 " … "tok119999 ": 1.1 MB of text
    big = routed(f"[[tokens:{tokens}]]", partition=2, max_tokens=tokens)
    after = routed("[[tokens:3]]", partition=2)
    for r in (big, after):
        await submit(worker, r)

    completed, chunks = await closing_events(kafka, after.request.request_id)
    assert completed.finish_reason == "stop"
    completed, chunks = await closing_events(kafka, big.request.request_id)
    assert (completed.finish_reason, completed.error_code) == ("length", None)
    assert 0 < len(completed.content.encode()) <= REPLY_MAX_BYTES
    assert completed.content == "".join(c.text for c in chunks)
    assert chunks[-1].finish_reason == "length" and [c.seq for c in chunks] == list(range(len(chunks)))


async def test_heartbeats_say_who_serves_what(worker: Running, kafka: KafkaSettings) -> None:
    def beat_with_partitions(seen: list[Seen]) -> list[WorkerHeartbeat]:
        return [
            s.event  # type: ignore[misc]
            for s in seen
            if isinstance(s.event, WorkerHeartbeat)
            and s.event.worker_id == worker.settings.worker_id
            and s.event.partitions
        ]

    seen = await read(kafka, "fleet.heartbeats", lambda s: bool(beat_with_partitions(s)))
    beat = beat_with_partitions(seen)[-1]
    assert (beat.pool, beat.model, beat.max_running, beat.draining) == ("small", "scripted-it", 8, False)
    assert beat.partitions == list(range(6))  # the only member of the group owns every partition
    assert len(beat.read_to) == 6 and all(at >= -1 for at in beat.read_to)


async def test_heartbeats_say_where_each_partition_was_taken_to(worker: Running, kafka: KafkaSettings) -> None:
    """The router counts what lies past it as the pool's backlog (streams/route_backlog.py)."""
    r = routed("[[tokens:2]]", partition=5)
    offset = await submit(worker, r)
    await closing_events(kafka, r.request.request_id)

    def taken(seen: list[Seen]) -> bool:
        return any(
            isinstance(s.event, WorkerHeartbeat)
            and s.event.worker_id == worker.settings.worker_id
            and dict(zip(s.event.partitions, s.event.read_to, strict=True)).get(5) == offset + 1
            for s in seen
        )

    await read(kafka, "fleet.heartbeats", taken)


async def test_stopping_drains_commits_everything_and_says_so(worker: Running, kafka: KafkaSettings) -> None:
    last = routed("[[tokens:30]][[step_ms:2]]", partition=4)
    offset = await submit(worker, last)
    await until(lambda: any(r.rid == f"{last.request.request_id}:0" for r in worker.engine.requests), "it to start")
    worker.stop.set()  # as SIGTERM does: the running request is finished, not dropped
    await asyncio.wait_for(worker.task, 60)

    completed, _ = await closing_events(kafka, last.request.request_id)
    assert completed.finish_reason == "stop"
    assert await asyncio.to_thread(committed, kafka, kafka.topic_prefix + worker.settings.group, 4) == offset + 1
    def last_beat_draining(seen: list[Seen]) -> bool:
        return any(
            isinstance(x.event, WorkerHeartbeat) and x.event.worker_id == worker.settings.worker_id and x.event.draining
            for x in seen
        )

    await read(kafka, "fleet.heartbeats", last_beat_draining)  # fails unless the draining beat was sent


# ------------------------------------------------------- the real engine, over HTTP


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    """Parley's CPU engine in synthetic mode, as its own process, spoken to by workers/sglang.py."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.engine", "--backend", "synthetic", "--port", str(port)]
        + ["--synthetic-ttft-ms", "20", "--synthetic-tokens-per-s", "200"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                tail = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                raise AssertionError(f"the engine exited: {tail}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the engine did not become healthy within 60 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_end_to_end_with_the_cpu_engine_over_http(engine_url: str, kafka: KafkaSettings) -> None:
    settings = WorkerSettings(pool="small", worker_id=f"it-http-{uuid.uuid4().hex[:6]}", engine_urls=engine_url)
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, kafka, stop=stop))  # engine=None: SGLangClient(engine_url)
    producer = EventProducer(kafka)
    try:
        whole = routed("Say something.", partition=0, max_tokens=24)
        long = routed("Say a lot.", partition=1, max_tokens=2000)  # ~10 s at 200 tokens/s: cancelled long before
        for r in (whole, long):
            await producer.send(r, partition=r.partition)

        completed, chunks = await closing_events(kafka, whole.request.request_id)
        assert completed.finish_reason in ("stop", "length") and completed.content
        assert "".join(c.text for c in chunks) == completed.content
        assert completed.usage.completion_tokens > 0 and completed.usage.prompt_tokens > 0
        assert completed.model.startswith("parley-synthetic") and completed.replica == settings.worker_id

        lid = long.request.request_id
        await read(kafka, "chat.tokens", lambda seen: bool(of(lid, TokenChunk)(seen)))  # it is streaming
        await producer.send(
            GenerationCancelRequested(
                conversation_id=long.conversation_id, user_id="u-it", request_id=lid, reason="user"
            )
        )
        completed, chunks = await closing_events(kafka, lid)
        assert completed.finish_reason == "cancelled"
        assert 0 < completed.usage.completion_tokens < 2000
        assert "".join(c.text for c in chunks) == completed.content
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        producer.close()
