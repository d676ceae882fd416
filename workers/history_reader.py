"""Reads what earlier owners left on the log for a redelivered request (the Kafka edge of workers/recovery.py).

Every record of a request is keyed by conversation (chat.tokens, chat.events)
or user (chat.usage), so ``parley.partitioning`` names the one partition of
each to read, from the routed event's ``occurred_at`` minus ``SLACK_S`` to the
end offset when the lookup began, outside any consumer group.

A lookup never guesses: ``verdict`` is asked only of a history read to every
end. Reading blocks, so it runs in threads, ``MAX_CONCURRENT`` rounds at a time;
a round stops after ``ROUND_S`` or ``MAX_RECORDS`` records of a partition, its
place kept in the ``Lookup``, and the next round reads on from there (nothing is
read twice). Rounds that read nothing (the broker away, a partition without a
leader, the key store away while the request's own records are opened) are
tried again with backoff; once a lookup has read nothing for ``GIVE_UP_S`` the
turn is ended ``history_unavailable`` (``recovery.unreadable``): a visible
error, never a second generation of a reply that may have finished.

Records are sorted out before they are decoded: the fingerprint tells a
record's type without reading it, and a chunk's, completion's or usage's
request id is read from its Avro body without opening its sealed fields. Only
the request's own records are decoded whole, so a lookup decrypts no other
user's content and asks the key service for no other user's key.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import fastavro
from confluent_kafka import Consumer, KafkaException, TopicPartition

from parley.consumer import poll_batch, reached, reader, watermarks
from parley.errors import BrokerUnavailable, Unavailable
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import Event, GenerationCompleted, InferenceRouted, TokenChunk, UsageRecorded
from workers.recovery import History, Verdict, unreadable, verdict

log = logging.getLogger(__name__)

#: How far before the routed event's ``occurred_at`` the lookup starts: producers' clocks differ.
SLACK_S = 30.0
#: Records one round reads of a partition at most; the next round reads on.
MAX_RECORDS = 200_000
#: Seconds one round may take; the next round reads on.
ROUND_S = 15.0
#: Seconds a lookup may read nothing before its turn is ended ``history_unavailable``.
GIVE_UP_S = 300.0
#: Seconds the broker may take to answer where a lookup starts and ends.
ASK_TIMEOUT_S = 10.0
#: Rounds at once per worker.
MAX_CONCURRENT = 2
#: Pauses between rounds that read nothing: doubling from the first to the last.
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 10.0

#: The events a history holds, by name.
HISTORY_EVENTS = frozenset({TokenChunk.__name__, GenerationCompleted.__name__, UsageRecorded.__name__})

Where = tuple[str, int]  # (topic, partition)


@dataclass
class Lookup:
    """One request's lookup: where the reading of each partition stands, and what of the request it found."""

    request_id: str
    starts: list[TopicPartition]  # each partition to read, its ``offset`` a timestamp (ms) to start from
    next: dict[Where, int] | None = None  # the next offset of each partition not read to its end; None: not begun
    ends: dict[Where, int] = field(default_factory=dict)  # each partition's end offset when the lookup began
    found: list[Event] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.next is not None and not self.next

    def begin(self, starts: dict[Where, int], ends: dict[Where, int]) -> None:
        """Read ``starts[p]`` up to ``ends[p]`` of each partition (those with nothing that recent left out)."""
        self.next = {where: offset for where, offset in starts.items() if offset < ends[where]}
        self.ends = ends

    def take(self, where: Where, offset: int, value: bytes | None) -> None:
        """The record at ``offset`` of ``where``, read in order."""
        assert self.next is not None
        event = of_request(value, self.request_id)  # if it raises (the key store away), the place stays here
        if event is not None:
            self.found.append(event)
        if offset + 1 < self.ends[where]:
            self.next[where] = offset + 1
        else:
            self.reached(where)

    def reached(self, where: Where) -> None:
        """The reading of ``where`` got to its end (the records past the last one taken were commit markers)."""
        assert self.next is not None
        self.next.pop(where, None)

    def history(self) -> History:
        return History(
            chunks=tuple(e for e in self.found if isinstance(e, TokenChunk)),
            completions=tuple(e for e in self.found if isinstance(e, GenerationCompleted)),
            usage=tuple(e for e in self.found if isinstance(e, UsageRecorded)),
            complete=self.done,
        )


def of_request(value: bytes | None, request_id: str) -> Event | None:
    """The event in ``value`` if it is a chunk, completion or usage of ``request_id``; else None, its sealed
    fields never opened. Raises ``Unavailable`` when the request's own sealed fields cannot be opened now."""
    schemas = codec.default_schemas()
    if value is None or len(value) < codec.HEADER_LEN or value[:2] != codec.MAGIC:
        return None
    known = schemas.by_fingerprint.get(bytes(value[2 : codec.HEADER_LEN]))
    if known is None or known.name not in HISTORY_EVENTS:
        return None
    try:  # the writer's own schema, no resolution: every version of the three has a request_id
        body = fastavro.schemaless_reader(io.BytesIO(value[codec.HEADER_LEN :]), known.parsed, None)
    except Exception:  # fastavro raises a mix; its own consumers dead-letter it: here it only is not this request's
        return None
    if not isinstance(body, dict) or body.get("request_id") != request_id:
        return None
    try:
        return codec.decode(value, schemas)
    except codec.CodecError:
        return None


class HistoryReader:
    """Reads a request's history from Kafka, a round at a time. Blocking: call ``read`` from a thread."""

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        slack_s: float = SLACK_S,
        max_records: int = MAX_RECORDS,
        round_s: float = ROUND_S,
    ) -> None:
        self._kafka = kafka
        self._slack_s = slack_s
        self._max_records = max_records
        self._round_s = round_s

    def lookup(self, routed: InferenceRouted) -> Lookup:
        """A lookup of ``routed``'s history, not begun."""
        since_ms = int(routed.occurred_at / 1000 - self._slack_s * 1000)
        wanted = [
            ("chat.tokens", routed.conversation_id),
            ("chat.events", routed.conversation_id),
            ("chat.usage", routed.user_id),
        ]
        starts = [
            TopicPartition(self._kafka.topic(t), partition_for(key, TOPICS[t].partitions), since_ms) for t, key in wanted
        ]
        return Lookup(routed.request.request_id, starts)

    def read(self, lookup: Lookup) -> bool:
        """One round of ``lookup`` (its first begins it); True when it moved on at all."""
        # Committed records only: never an aborted transaction's (a fenced worker's closing events), and
        # the end offsets are the last stable ones; pending transactions of the partition's previous owner
        # were waited out by the intake's start offset (workers/transactions.py).
        consumer = reader(self._kafka, "worker-recovery")
        try:
            began = lookup.next is None and self._begin(consumer, lookup)
            return self._round(consumer, lookup) or began
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot read the history of a redelivered request: {exc}") from exc
        finally:
            consumer.close()

    def _begin(self, consumer: Consumer, lookup: Lookup) -> bool:
        starts: dict[Where, int] = {}
        ends: dict[Where, int] = {}
        for tp in consumer.offsets_for_times(lookup.starts, timeout=ASK_TIMEOUT_S):
            _, high = watermarks(consumer, tp, ASK_TIMEOUT_S)
            if tp.offset >= 0:  # -1: nothing that recent
                starts[(tp.topic, tp.partition)] = tp.offset
                ends[(tp.topic, tp.partition)] = high
        lookup.begin(starts, ends)
        return True

    def _round(self, consumer: Consumer, lookup: Lookup) -> bool:
        assert lookup.next is not None
        if not lookup.next:
            return False
        deadline = time.monotonic() + self._round_s
        left = {where: lookup.ends[where] for where in lookup.next}  # what this round still reads
        read: dict[Where, int] = defaultdict(int)
        moved = False
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in lookup.next.items()])
        while left:
            for msg in poll_batch(consumer, 500, 0.2):
                where = (msg.topic(), msg.partition())
                if msg.error() or where not in left or msg.offset() >= left[where]:
                    continue
                lookup.take(where, msg.offset(), msg.value())
                moved = True
                read[where] += 1
                if where not in lookup.next or read[where] >= self._max_records:
                    del left[where]
                    consumer.pause([TopicPartition(*where)])
            for where in reached(consumer, left):
                lookup.reached(where)
                moved = True
                del left[where]
                consumer.pause([TopicPartition(*where)])
            # Past its time a round still waits for its first record (a fresh consumer's first fetch),
            # up to ASK_TIMEOUT_S more: a round that can never fetch in time would never move on.
            if time.monotonic() >= deadline + (0.0 if moved else ASK_TIMEOUT_S):
                break
        return moved


class Recovery:
    """What the scheduler calls for an inherited request: the verdict of its whole history, read off the event loop."""

    def __init__(
        self,
        reader: HistoryReader,
        *,
        max_concurrent: int = MAX_CONCURRENT,
        give_up_s: float = GIVE_UP_S,
        first_pause_s: float = FIRST_PAUSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader
        self._slots = asyncio.Semaphore(max_concurrent)
        self._give_up_s = give_up_s
        self._first_pause_s = first_pause_s
        self._clock = clock

    async def __call__(self, routed: InferenceRouted) -> Verdict:
        rid = routed.request.request_id
        lookup = self._reader.lookup(routed)
        rounds = 0
        pause = self._first_pause_s
        still_since = self._clock()  # when the lookup last moved on
        while not lookup.done:
            rounds += 1
            try:
                async with self._slots:
                    moved = await asyncio.to_thread(self._reader.read, lookup)
            except Unavailable as exc:
                moved = False
                log.warning("redelivered request's history not read; retrying", extra={"request_id": rid, "error": str(exc)})
            if moved:
                pause, still_since = self._first_pause_s, self._clock()
                continue
            if self._clock() - still_since >= self._give_up_s:
                log.error(
                    "redelivered request's history could not be read; its turn is ended history_unavailable",
                    extra={"request_id": rid, "rounds": rounds, "give_up_s": self._give_up_s},
                )
                return unreadable(routed, lookup.history())
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)
        history = lookup.history()
        found = verdict(routed, history)
        log.info(
            "redelivered request looked up",
            extra={
                "request_id": rid,
                "verdict": type(found).__name__,
                "rounds": rounds,
                "chunks": len(history.chunks),
                "completions": len(history.completions),
            },
        )
        return found
