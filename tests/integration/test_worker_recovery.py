"""A worker taking over requests a previous owner left behind, against the real Kafka.

Each test plays the dead (or drained) worker's part on this module's topics, then starts a worker
in group ``workers.small`` with the in-memory engine (workers/scripted.py), which continues a
reply whose text is already ``tok0 … tokK-1``. What it wrote to chat.tokens, chat.events and
chat.usage, what the engine was asked and what the group committed show what it did.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from parley.kafka import EventProducer
from parley.settings import KafkaSettings
from schemas.events import GenerationCompleted, InferenceRouted, TokenChunk, Usage, UsageRecorded
from tests.integration.test_worker import committed, of, read, routed, until
from workers.history_reader import HistoryReader, Recovery
from workers.recovery import Finished
from workers.scripted import ScriptedEngine, scripted_reply
from workers.settings import WorkerSettings
from workers.worker import run_worker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]


@asynccontextmanager
async def a_worker(kafka: KafkaSettings, engine: ScriptedEngine, **overrides: object) -> AsyncIterator[asyncio.Event]:
    settings = WorkerSettings(pool="small", worker_id=f"it-rec-{uuid.uuid4().hex[:6]}", heartbeat_s=0.5, **overrides)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, kafka, engine=engine, stop=stop))
    try:
        yield stop
    finally:
        stop.set()  # a held reply stays held: a drain deadline, not the test, decides its fate
        await asyncio.wait_for(task, 90)


def text_chunks(r: InferenceRouted, tokens: range, *, attempt: int = 0, per_chunk: int = 2) -> list[TokenChunk]:
    """The chunks a worker streams for tokens ``tokens`` of the scripted reply."""
    out = []
    start = len(scripted_reply(tokens.start))
    for seq, first in enumerate(range(tokens.start, tokens.stop, per_chunk)):
        text = "".join(f"tok{i} " for i in range(first, min(first + per_chunk, tokens.stop)))
        out.append(
            TokenChunk(
                conversation_id=r.conversation_id,
                user_id=r.user_id,
                request_id=r.request.request_id,
                attempt=attempt,
                seq=seq,
                text=text,
                tokens=min(per_chunk, tokens.stop - first),
                offset_chars=start,
                replica="dead",
            )
        )
        start += len(text)
    return out


def completed(r: InferenceRouted, content: str) -> GenerationCompleted:
    return GenerationCompleted(
        conversation_id=r.conversation_id,
        user_id=r.user_id,
        request_id=r.request.request_id,
        parent_id=r.request.parent_id,
        finish_reason="stop",
        content=content,
        usage=Usage(prompt_tokens=9, completion_tokens=6),
        pool="small",
        model="scripted-dead",
        replica="dead",
    )


async def test_redelivered_requests_resume_from_their_text_or_are_not_generated_again(kafka: KafkaSettings) -> None:
    producer = EventProducer(kafka)
    half = routed("[[tokens:12]] half done", partition=0)
    unclosed = routed("[[tokens:6]] finished, its final chunk lost", partition=1)
    whole = routed("[[tokens:6]] finished and closed", partition=2)
    fresh = routed("[[tokens:5]] never started", partition=3)
    try:
        offsets = {}
        for r in (half, unclosed, whole, fresh):
            offsets[r.request.request_id] = await producer.send(r, partition=r.partition)
        # What the dead worker got onto the log before it died, in the order it produces.
        for c in text_chunks(half, range(0, 5)):
            await producer.send(c)
        for c in text_chunks(unclosed, range(0, 6)):
            await producer.send(c)
        await producer.send(completed(unclosed, scripted_reply(6)))  # … and died before the final chunk
        for c in text_chunks(whole, range(0, 6)):
            await producer.send(c)
        await producer.send(completed(whole, scripted_reply(6)))
        closing = TokenChunk(
            conversation_id=whole.conversation_id,
            user_id=whole.user_id,
            request_id=whole.request.request_id,
            seq=3,
            offset_chars=len(scripted_reply(6)),
            finish_reason="stop",
            usage=Usage(prompt_tokens=9, completion_tokens=6),
        )
        await producer.send(closing)
        await producer.send(
            UsageRecorded(
                conversation_id=whole.conversation_id,
                user_id=whole.user_id,
                request_id=whole.request.request_id,
                usage=Usage(prompt_tokens=9, completion_tokens=6),
                finish_reason="stop",
            )
        )
        # ... and its partitions' commits lagged: the whole group starts from the beginning.

        engine = ScriptedEngine(model="scripted-it")
        async with a_worker(kafka, engine):
            hid = half.request.request_id
            tokens = await read(
                kafka, "chat.tokens", lambda s: any(x.event.finish_reason and x.event.attempt == 1 for x in of(hid, TokenChunk)(s))
            )
            events = await read(kafka, "chat.events", lambda s: len(of(hid, GenerationCompleted)(s)) == 1)
            (done,) = [s.event for s in of(hid, GenerationCompleted)(events)]
            assert isinstance(done, GenerationCompleted)
            assert (done.attempt, done.content) == (1, scripted_reply(12))  # continued: no duplicated text
            assert done.usage.completion_tokens == 12  # the 5 tokens of attempt 0 count
            resumed = sorted((s.event for s in of(hid, TokenChunk)(tokens) if s.event.attempt == 1), key=lambda c: c.seq)  # type: ignore[attr-defined]
            assert resumed[0].seq == 0 and resumed[0].offset_chars == len(scripted_reply(5))
            assert scripted_reply(5) + "".join(c.text for c in resumed) == scripted_reply(12)
            (request,) = [q for q in engine.requests if q.rid.startswith(hid)]
            assert request.rid == f"{hid}:1" and request.text.endswith(scripted_reply(5))

            uid = unclosed.request.request_id
            tokens = await read(kafka, "chat.tokens", lambda s: any(x.event.finish_reason for x in of(uid, TokenChunk)(s)))
            (last,) = [s.event for s in of(uid, TokenChunk)(tokens) if s.event.finish_reason]  # type: ignore[attr-defined]
            assert (last.attempt, last.seq, last.offset_chars, last.finish_reason) == (0, 3, len(scripted_reply(6)), "stop")
            usage = await read(kafka, "chat.usage", lambda s: bool(of(uid, UsageRecorded)(s)))
            assert len(of(uid, UsageRecorded)(usage)) == 1

            fid = fresh.request.request_id
            tokens = await read(kafka, "chat.tokens", lambda s: any(x.event.finish_reason for x in of(fid, TokenChunk)(s)))
            # Never started as far as the log shows; a previous owner's chunks could still be on their way, so
            # it runs as the next attempt, which readers follow over any late chunk of attempt 0.
            assert {s.event.attempt for s in of(fid, TokenChunk)(tokens)} == {1}  # type: ignore[attr-defined]

            # Every record is done and committed; the finished ones never reached the engine.
            for r in (half, unclosed, whole, fresh):
                position = offsets[r.request.request_id].offset + 1
                await until(lambda r=r, p=position: committed(kafka, kafka.topic_prefix + "workers.small", r.partition) == p, "the commits")
            asked = {q.rid.rsplit(":", 1)[0] for q in engine.requests}
            assert unclosed.request.request_id not in asked and whole.request.request_id not in asked
            wid = whole.request.request_id
            tokens = await read(kafka, "chat.tokens", lambda s: bool(of(wid, TokenChunk)(s)))
            events = await read(kafka, "chat.events", lambda s: bool(of(wid, GenerationCompleted)(s)))
            assert len([s for s in of(wid, TokenChunk)(tokens) if s.event.finish_reason]) == 1  # type: ignore[attr-defined]
            assert len(of(wid, GenerationCompleted)(events)) == 1
    finally:
        producer.close()


async def test_a_drain_hands_back_what_it_cannot_finish_and_the_next_worker_resumes_it(kafka: KafkaSettings) -> None:
    producer = EventProducer(kafka)
    r = routed("[[tokens:20]][[hold:6]] a long one", partition=4)
    rid = r.request.request_id
    try:
        offset = (await producer.send(r, partition=r.partition)).offset
        first = ScriptedEngine(model="scripted-first")
        # The record was there before the worker joined: looked up, nothing found, run as attempt 1.
        async with a_worker(kafka, first, drain_timeout_s=0.5) as stop:
            await until(lambda: f"{rid}:1" in first.holding, "the first worker to be mid-reply")
            stop.set()  # SIGTERM: the held reply cannot finish within the drain deadline
        assert f"{rid}:1" in first.aborted  # its engine slot was freed
        assert await asyncio.to_thread(committed, kafka, "workers.small", 4) <= offset  # handed back, not committed
        tokens = await read(kafka, "chat.tokens", lambda s: len(of(rid, TokenChunk)(s)) >= 1)
        assert not any(s.event.finish_reason for s in of(rid, TokenChunk)(tokens))  # type: ignore[attr-defined]

        second = ScriptedEngine(model="scripted-second")
        async with a_worker(kafka, second):
            events = await read(kafka, "chat.events", lambda s: bool(of(rid, GenerationCompleted)(s)))
            (done,) = [s.event for s in of(rid, GenerationCompleted)(events)]
            assert isinstance(done, GenerationCompleted)
            assert (done.attempt, done.content, done.finish_reason) == (2, scripted_reply(20), "stop")
            (request,) = second.requests
            assert request.rid == f"{rid}:2" and request.text.endswith(scripted_reply(6))
            await until(lambda: committed(kafka, kafka.topic_prefix + "workers.small", 4) == offset + 1, "the commit")
    finally:
        producer.close()


async def test_a_turn_sent_again_after_the_partition_moved_is_looked_up_not_generated_twice(kafka: KafkaSettings) -> None:
    """The context builder sends a turn again after its restart; the router sends the second record where
    the first went, marked a repeat, but a new owner holds that partition now. The record is new to the
    partition, the turn is not: it is looked up, and the previous owner's reply stands."""
    producer = EventProducer(kafka)
    probe = routed("[[tokens:3]] shows the partition is held", partition=5)
    first = routed("[[tokens:6]] answered by the previous owner", partition=5)
    again = replace(first, repeat=True)  # as the router repeats a decision
    try:
        for c in text_chunks(first, range(0, 6)):
            await producer.send(c)
        await producer.send(completed(first, scripted_reply(6)))
        engine = ScriptedEngine(model="scripted-it")
        async with a_worker(kafka, engine):
            await producer.send(probe, partition=5)
            pid = probe.request.request_id
            await read(kafka, "chat.tokens", lambda s: any(x.event.finish_reason for x in of(pid, TokenChunk)(s)))
            await producer.send(again, partition=5)
            rid = first.request.request_id
            # Its stream's end was missing (the previous owner died before it): produced from the completion.
            tokens = await read(kafka, "chat.tokens", lambda s: any(x.event.finish_reason for x in of(rid, TokenChunk)(s)))
            assert {s.event.attempt for s in of(rid, TokenChunk)(tokens)} == {0}  # type: ignore[attr-defined]
            events = await read(kafka, "chat.events", lambda s: bool(of(rid, GenerationCompleted)(s)))
            assert len(of(rid, GenerationCompleted)(events)) == 1
            assert not [q for q in engine.requests if q.rid.startswith(rid)]  # never generated again
    finally:
        producer.close()


@pytest.mark.parametrize("bound", [{"max_records": 3}, {"round_s": 0.0}], ids=["record bound", "time bound"])
async def test_a_lookup_stopped_by_its_bound_reads_on_to_the_completion(kafka: KafkaSettings, bound: dict[str, float]) -> None:
    """Review C1: each round of the lookup stops at a bound (3 records of a partition, or its first batch)
    long before the reply's completion, which lies past 20 chunks of other replies of its conversation.
    The lookup used to call that history incomplete and resume it: a finished reply generated twice."""
    producer = EventProducer(kafka)
    r = routed("[[tokens:6]] finished and closed", partition=6)
    try:
        for c in text_chunks(r, range(0, 6)):
            await producer.send(c)
        for _ in range(20):  # the conversation's other replies, on the same partitions
            other = replace(r, request=replace(r.request, request_id=str(uuid.uuid4())))
            for c in text_chunks(other, range(0, 2)):
                await producer.send(c)
            await producer.send(completed(other, scripted_reply(2)))
        await producer.send(completed(r, scripted_reply(6)))
        final = text_chunks(r, range(0, 6))[-1]
        await producer.send(replace(final, seq=3, text="", tokens=0, offset_chars=len(scripted_reply(6)), finish_reason="stop"))
        await producer.send(UsageRecorded(conversation_id=r.conversation_id, user_id=r.user_id, request_id=r.request.request_id))
        found = await Recovery(HistoryReader(kafka, **bound))(r)  # type: ignore[arg-type]
        assert found == Finished()  # every closing event found: nothing generated, nothing produced again
    finally:
        producer.close()
