"""The gateway's token reader (gateway/tokens.py) against the real Kafka: every stream gets every
chunk of its reply that is on the log at or after its offset, in order, whatever other streams
open, replay or close on the same partitions meanwhile."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid

import pytest

from gateway.tokens import Stream, TokenStreams
from parley.errors import BrokerUnavailable
from parley.kafka import EventProducer
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS
from schemas.events import TokenChunk

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="session")]

PARTITIONS = TOPICS["chat.tokens"].partitions


def conversation_on(partition: int) -> str:
    while True:
        cid = str(uuid.uuid4())
        if partition_for(cid, PARTITIONS) == partition:
            return cid


def chunks(cid: str, request_id: str, n: int) -> list[TokenChunk]:
    """A reply of ``n`` chunks; the last one finishes it."""
    return [
        TokenChunk(
            conversation_id=cid,
            user_id="u",
            request_id=request_id,
            seq=seq,
            text=f" w{seq}",
            tokens=1,
            finish_reason="stop" if seq == n - 1 else None,
        )
        for seq in range(n)
    ]


async def every_partition_answers(reader: TokenStreams) -> None:
    """Just-created topics: a partition's leader may refuse for a moment (NOT_LEADER), as a
    gateway would then answer 503; the stress is about streams, not that."""
    async with asyncio.timeout(30):
        for p in range(PARTITIONS):
            while True:
                try:
                    await reader.note_end(p)
                    break
                except BrokerUnavailable:
                    await asyncio.sleep(0.2)


async def received(stream: Stream, timeout: float = 20.0) -> list[int]:
    """The seqs a stream got, up to its reply's last chunk."""
    seqs = []
    async with asyncio.timeout(timeout):
        while True:
            chunk = await stream.queue.get()
            seqs.append(chunk.event.seq)
            if chunk.event.finish_reason is not None:
                return seqs


async def test_a_second_stream_opened_before_the_first_record_never_skips_the_first_streams_chunks(
    kafka: KafkaSettings,
) -> None:
    """The cause of a client's missing first words: two streams open on a partition the reader
    had not assigned, in one batch of commands; the reader once took "no record yet" for "far
    ahead", sought the second stream's offset and skipped the first stream's opening chunks."""
    producer = EventProducer(kafka)
    reader = TokenStreams(kafka)
    try:
        cid = conversation_on(1)
        first = [await producer.send(c) for c in chunks(cid, "first", 5)]
        second = [await producer.send(c) for c in chunks(cid, "second", 3)]
        # Both opens are queued before the reader thread runs: it applies them together.
        a = reader.open("first", 1, first[0].offset)
        b = reader.open("second", 1, second[0].offset)
        reader.start()
        assert await received(a) == [0, 1, 2, 3, 4]
        assert await received(b) == [0, 1, 2]
    finally:
        reader.close()
        producer.close()


async def test_many_streams_opening_replaying_and_closing_at_once_each_get_every_chunk(kafka: KafkaSettings) -> None:
    """A stress of the reader as a loaded gateway drives it: replies on every partition, each
    stream opened at the end offset noted just before its reply is produced (as a POST does), some
    replayed from their first chunk while live (as a resume does), with the CPU busy."""
    producer = EventProducer(kafka)
    reader = TokenStreams(kafka)
    reader.start()
    await every_partition_answers(reader)
    rng = random.Random(12)
    stop = threading.Event()

    def burn() -> None:  # holds the GIL in slices, as a busy gateway's other work does
        while not stop.is_set():
            sum(i * i for i in range(20_000))

    burners = [threading.Thread(target=burn, daemon=True) for _ in range(2)]
    for t in burners:
        t.start()

    async def reply(i: int) -> list[tuple[str, list[int], list[int]]]:
        await asyncio.sleep(rng.random() * 0.5)
        partition = rng.randrange(PARTITIONS) if i % 3 else i % 2  # some partitions crowded
        cid = conversation_on(partition)
        rid = f"r{i}"
        n = rng.randint(2, 12)
        noted = await reader.note_end(partition)
        live = reader.open(rid, partition, noted)
        sent = []
        for c in chunks(cid, rid, n):
            sent.append(await producer.send(c))
            await asyncio.sleep(rng.random() * 0.01)
        got = [("live", await received(live), list(range(n)))]
        reader.close_stream(live)
        if i % 4 == 0:  # a resume from the reply's first chunk, after it ended
            replay = reader.open(rid, partition, sent[0].offset)
            got.append(("replay", await received(replay), list(range(n))))
            reader.close_stream(replay)
        return got

    try:
        started = time.monotonic()
        results = await asyncio.gather(*(reply(i) for i in range(120)))
        wrong = [(i, kind, got) for i, r in enumerate(results) for kind, got, want in r if got != want]
        print(f"\n120 replies, {sum(len(r) for r in results)} streams in {time.monotonic() - started:.1f}s")
        assert wrong == []
    finally:
        stop.set()
        reader.close()
        producer.close()
