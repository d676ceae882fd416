"""The archive and Kafka as one timeline: each partition's archived records, then the brokers' from
the offset after the last archived one, so the boundary has no gap and no duplicate.

A time window means the same on both sides: a partition's part starts at its first record
timestamped at or after ``since`` (Kafka: ``offsets_for_times``) and stops before its first
record timestamped after ``until``. ``TimelineStats`` says, per partition, where the Kafka
part started (the lookup), what was read from where, and any hole: offsets after the archive
that the brokers no longer hold (retention ran before ``parley archive`` did).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from parley.settings import KafkaSettings
from tools.analysts import archive, logread
from tools.analysts.location import Location


@dataclass
class PartitionStats:
    topic: str
    partition: int
    kafka_start: int  # offset the timestamp lookup (or the archive's end) gave
    kafka_end: int  # first offset not read: past ``until``, or the end noted when the read began
    archive_records: int = 0
    kafka_records: int = 0
    first_offset: int | None = None  # first offset read, from either side
    last_offset: int | None = None
    first_kafka_offset: int | None = None
    duplicates: int = 0  # records read twice and dropped (the merge makes none)
    # Offsets after the archive that the brokers no longer hold (retention ran before the archive
    # did). Gaps between records read are not holes: a transaction's commit marker takes an offset
    # and is never delivered, nor are an aborted transaction's records (DESIGN.md §5).
    holes: int = 0

    def see(self, offset: int) -> bool:
        """Count ``offset``; False when it is not past the last one (a duplicate, dropped)."""
        if self.last_offset is not None and offset <= self.last_offset:
            self.duplicates += 1
            return False
        if self.first_offset is None:
            self.first_offset = offset
        self.last_offset = offset
        return True


@dataclass
class TimelineStats:
    partitions: dict[tuple[str, int], PartitionStats] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(s.archive_records + s.kafka_records for s in self.partitions.values())

    def to_record(self) -> list[dict[str, object]]:
        return [vars(s) for _, s in sorted(self.partitions.items())]


def _archived(
    location: Location, topic: str, partition: int, segs: list[archive.Segment], since_ms: int | None, until_ms: int | None
) -> Iterator[logread.Raw]:
    """A partition's archived records within the window (same start/stop rule as Kafka's lookups)."""
    started = since_ms is None
    for seg in segs:
        if not started and since_ms is not None and seg.day < archive.day_of(since_ms - 86_400_000):
            continue  # a whole day before the window (timestamps may lag a little; a day of slack)
        for raw in archive.read_segment(location, seg):
            if not started:
                if raw.timestamp_ms < since_ms:  # type: ignore[operator]
                    continue
                started = True
            if until_ms is not None and raw.timestamp_ms > until_ms:
                return
            yield raw


def read(
    kafka: KafkaSettings,
    topics: list[str],
    since_ms: int | None = None,
    until_ms: int | None = None,
    *,
    location: Location | None = None,
    partitions: dict[str, set[int]] | None = None,
    stats: TimelineStats | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> Iterator[logread.Raw]:
    """Every record of ``topics`` in the window: the archive's first, then Kafka's, each partition in offset order."""
    stats = stats if stats is not None else TimelineStats()
    consumer = logread.reader(kafka)
    try:
        spans = logread.plan(consumer, kafka, topics, since_ms, until_ms, partitions)
        starts: dict[tuple[str, int], int] = {}
        archived = {t: archive.segments(location, t) for t in topics} if location is not None else {}
        for span in spans:
            stats.partitions[(span.topic, span.partition)] = PartitionStats(span.topic, span.partition, span.start, span.end)
        if on_plan is not None:
            on_plan(sum(s.size for s in spans) + sum(
                seg.last - seg.first + 1 for by_p in archived.values() for segs in by_p.values() for seg in segs
            ))
        for span in spans:
            segs = archived.get(span.topic, {}).get(span.partition, [])
            if not segs:
                continue
            st = stats.partitions[(span.topic, span.partition)]
            for raw in _archived(location, span.topic, span.partition, segs, since_ms, until_ms):  # type: ignore[arg-type]
                if st.see(raw.offset):
                    st.archive_records += 1
                    yield raw
            if on_batch is not None:
                on_batch(st.archive_records)
            # Kafka takes over after the last archived offset, wherever the window put the archive's part.
            starts[(span.topic, span.partition)] = segs[-1].last + 1
            st.kafka_start = max(span.start, segs[-1].last + 1)
            # Retention deletes whole segments from the start: a partition whose oldest offset is past
            # the archive's next one lost records in between (or, at worst, only a commit marker).
            st.holes = max(0, span.low - (segs[-1].last + 1))
        for raw in logread.read(consumer, kafka, spans, starts=starts, on_batch=on_batch):
            st = stats.partitions[(raw.topic, raw.partition)]
            if st.see(raw.offset):
                st.kafka_records += 1
                if st.first_kafka_offset is None:
                    st.first_kafka_offset = raw.offset
                yield raw
    finally:
        consumer.close()
