"""Reads what earlier owners left on the log for a redelivered request (the Kafka edge of workers/recovery.py).

Every record of a request is keyed by conversation (chat.tokens, chat.events)
or user (chat.usage), so ``parley.partitioning`` names the one partition of
each to read, from the routed event's ``occurred_at`` minus ``SLACK_S`` to the
end offset at lookup time, outside any consumer group. A lookup is bounded
(``MAX_RECORDS`` per partition, ``TIMEOUT_S`` in all: past either the history
is marked incomplete) and blocking, so ``Recovery`` runs it in threads,
``MAX_CONCURRENT`` at a time, and hands the records to ``verdict``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from confluent_kafka import Consumer, KafkaException, TopicPartition

from parley.consumer import poll_batch, reached, reader, watermarks
from parley.errors import BrokerUnavailable
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import Event, GenerationCompleted, InferenceRouted, TokenChunk, UsageRecorded
from workers.recovery import History, Verdict, verdict

log = logging.getLogger(__name__)

#: How far before the routed event's ``occurred_at`` the lookup starts: producers' clocks differ.
SLACK_S = 30.0
#: Records read per partition at most; past it the history is incomplete.
MAX_RECORDS = 200_000
#: Seconds one lookup may take in all.
TIMEOUT_S = 15.0
#: Lookups at once per worker.
MAX_CONCURRENT = 2



class HistoryReader:
    """Reads a request's history from Kafka. Blocking: call ``read`` from a thread."""

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        slack_s: float = SLACK_S,
        max_records: int = MAX_RECORDS,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._kafka = kafka
        self._slack_s = slack_s
        self._max_records = max_records
        self._timeout_s = timeout_s

    def read(self, routed: InferenceRouted) -> History:
        since_ms = int(routed.occurred_at / 1000 - self._slack_s * 1000)
        wanted = [
            ("chat.tokens", routed.conversation_id),
            ("chat.events", routed.conversation_id),
            ("chat.usage", routed.user_id),
        ]
        # Committed records only: never an aborted transaction's (a fenced worker's closing events), and
        # the end offsets are the last stable ones; pending transactions of the partition's previous owner
        # were waited out by the intake's start offset (workers/transactions.py).
        consumer = reader(self._kafka, "worker-recovery")
        try:
            return self._read(consumer, routed.request.request_id, wanted, since_ms)
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot read the history of a redelivered request: {exc}") from exc
        finally:
            consumer.close()

    def _read(self, consumer: Consumer, request_id: str, wanted: list[tuple[str, str]], since_ms: int) -> History:
        deadline = time.monotonic() + self._timeout_s
        starts = [
            TopicPartition(self._kafka.topic(t), partition_for(key, TOPICS[t].partitions), since_ms) for t, key in wanted
        ]
        found = consumer.offsets_for_times(starts, timeout=self._timeout_s)
        ends: dict[tuple[str, int], int] = {}
        assign = []
        for tp in found:
            _, high = watermarks(consumer, tp, self._timeout_s)
            if 0 <= tp.offset < high:  # -1: nothing that recent
                ends[(tp.topic, tp.partition)] = high
                assign.append(TopicPartition(tp.topic, tp.partition, tp.offset))
        records: list[Event] = []
        read: dict[tuple[str, int], int] = defaultdict(int)
        complete = True
        if assign:
            consumer.assign(assign)
        while ends:
            if time.monotonic() > deadline:
                complete = False
                break
            for msg in poll_batch(consumer, 500, 0.2):
                if msg.error() or msg.value() is None:
                    continue
                where = (msg.topic(), msg.partition())
                if where not in ends or msg.offset() >= ends[where]:
                    continue
                read[where] += 1
                if read[where] >= self._max_records and msg.offset() < ends[where] - 1:
                    complete = False
                    del ends[where]
                    consumer.pause([TopicPartition(*where)])
                event = _decode(msg.value())
                if getattr(event, "request_id", None) == request_id:
                    records.append(event)  # type: ignore[arg-type]
            for where in reached(consumer, ends):
                del ends[where]
                consumer.pause([TopicPartition(*where)])
        return History(
            chunks=tuple(e for e in records if isinstance(e, TokenChunk)),
            completions=tuple(e for e in records if isinstance(e, GenerationCompleted)),
            usage=tuple(e for e in records if isinstance(e, UsageRecorded)),
            complete=complete,
        )


def _decode(value: bytes) -> Event | None:
    try:
        return codec.decode(value)
    except codec.CodecError:
        return None  # its own consumers dead-letter it; here it only is not this request's


class Recovery:
    """What the scheduler calls for an inherited request: the verdict, read off the event loop."""

    def __init__(self, reader: HistoryReader, max_concurrent: int = MAX_CONCURRENT) -> None:
        self._reader = reader
        self._slots = asyncio.Semaphore(max_concurrent)

    async def __call__(self, routed: InferenceRouted) -> Verdict:
        async with self._slots:
            history = await asyncio.to_thread(self._reader.read, routed)
        found = verdict(routed, history)
        log.info(
            "redelivered request looked up",
            extra={
                "request_id": routed.request.request_id,
                "verdict": type(found).__name__,
                "complete": history.complete,
                "chunks": len(history.chunks),
                "completions": len(history.completions),
            },
        )
        return found
