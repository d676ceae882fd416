"""Reading ranges of the log straight from the brokers, outside every consumer group.

Analysts must not disturb the services: the consumer here ``assign``s partitions
explicitly, never subscribes, never commits, so no group is joined or moved. Where
a range starts is found by timestamp (``offsets_for_times``), not by scanning from
offset zero; where it ends is fixed when the read is planned (the offset of the
first record past ``until``, else the end offset noted then), so a replay of a
live system still finishes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from parley import consumer as shared
from parley.consumer import poll_batch, watermarks
from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS

#: A read that gets no record and no end-of-partition for this long has lost its broker.
STALL_S = 60.0


class Raw(NamedTuple):
    """One record as the log holds it: bytes undecoded, so a reader may skip it cheaply.

    A named tuple rather than a frozen dataclass: one is made per record read, and a frozen
    dataclass's ``__init__`` costs more than the rest of the read of a record."""

    topic: str  # catalog name, without the deployment's prefix
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Span:
    """Offsets [start, end) of one partition to read; ``low`` is the oldest offset the broker still has."""

    topic: str
    partition: int
    start: int
    end: int
    low: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def reader(kafka: KafkaSettings) -> Consumer:
    """A consumer that only ever uses ``assign``, in large fetches, told when a partition ends."""
    return shared.reader(
        kafka,
        "analysts",
        enable_partition_eof=True,
        auto_offset_reset="earliest",
        fetch_max_bytes=16 * 1024 * 1024,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )


def plan(
    consumer: Consumer,
    kafka: KafkaSettings,
    topics: list[str],
    since_ms: int | None = None,
    until_ms: int | None = None,
    partitions: dict[str, set[int]] | None = None,
) -> list[Span]:
    """Where each partition's range starts and ends: by timestamp lookup, bounded by the end offsets now."""
    wanted = [
        (t, p)
        for t in topics
        for p in range(TOPICS[t].partitions)
        if partitions is None or t not in partitions or p in partitions[t]
    ]
    try:
        marks = {(t, p): watermarks(consumer, TopicPartition(kafka.topic(t), p), 10) for t, p in wanted}
        starts = _lookup(consumer, kafka, wanted, since_ms)
        ends = _lookup(consumer, kafka, wanted, None if until_ms is None else until_ms + 1)
    except KafkaException as exc:
        raise BrokerUnavailable(f"looking up offsets at {kafka.bootstrap} (PARLEY_KAFKA_BOOTSTRAP) failed: {exc}") from exc
    spans = []
    for t, p in wanted:
        low, high = marks[(t, p)]
        start = starts.get((t, p), low)
        end = ends.get((t, p), high)
        start = high if start < 0 else max(start, low)  # -1: no record at or after the time
        end = high if end < 0 else min(end, high)
        spans.append(Span(t, p, start, max(start, end), low))
    return spans


def _lookup(
    consumer: Consumer, kafka: KafkaSettings, wanted: list[tuple[str, int]], at_ms: int | None
) -> dict[tuple[str, int], int]:
    if at_ms is None or not wanted:
        return {}
    found = consumer.offsets_for_times([TopicPartition(kafka.topic(t), p, at_ms) for t, p in wanted], timeout=10)
    names = {kafka.topic(t): t for t, _ in wanted}
    return {(names[tp.topic], tp.partition): tp.offset for tp in found}


def read(
    consumer: Consumer,
    kafka: KafkaSettings,
    spans: list[Span],
    *,
    starts: dict[tuple[str, int], int] | None = None,
    on_batch: Callable[[int], None] | None = None,
    batch: int = 2000,
) -> Iterator[Raw]:
    """Every record of ``spans``, in offset order within a partition (``starts`` may move a span's start on)."""
    open_: dict[tuple[str, int], int] = {}  # (physical topic, partition) → end
    names = {kafka.topic(s.topic): s.topic for s in spans}
    assign = []
    for s in spans:
        start = max(s.start, (starts or {}).get((s.topic, s.partition), s.start))
        if start < s.end:
            open_[(kafka.topic(s.topic), s.partition)] = s.end
            assign.append(TopicPartition(kafka.topic(s.topic), s.partition, start))
    if not assign:
        return
    consumer.assign(assign)
    last_progress = time.monotonic()
    try:
        while open_:
            try:
                messages = poll_batch(consumer, batch, 0.5)
            except KafkaException as exc:
                raise BrokerUnavailable(f"reading the log at {kafka.bootstrap} failed: {exc}") from exc
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_S:
                raise BrokerUnavailable(f"no record from {kafka.bootstrap} for {STALL_S:.0f} s with {len(open_)} partitions unread")
            finished = []
            taken = 0
            for msg in messages:
                where = (msg.topic(), msg.partition())
                end = open_.get(where)
                if end is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        finished.append(where)
                        continue
                    raise BrokerUnavailable(f"reading {where[0]}[{where[1]}] failed: {error.str()}")
                offset = msg.offset()
                if offset >= end:
                    finished.append(where)
                    continue
                taken += 1
                yield Raw(names[where[0]], where[1], offset, msg.timestamp()[1], msg.key(), msg.value())
                if offset >= end - 1:
                    finished.append(where)
            for where in finished:
                if open_.pop(where, None) is not None:
                    consumer.incremental_unassign([TopicPartition(where[0], where[1])])
            if on_batch is not None and taken:
                on_batch(taken)
    finally:
        consumer.unassign()
