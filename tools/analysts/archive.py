"""The cold tier: records older than a cut-off, copied into Avro object container files.

Layout under the location (a local directory or an fsspec URL)::

    <topic>/<YYYY-MM-DD>/p<partition>-<first offset>-<last offset>.avro

one file per topic, UTC day of the record timestamps, partition and run (split
every ``MAX_PER_FILE`` records). Each Avro record is the Kafka record itself:
partition, offset, timestamp, key and the value's bytes unchanged (the
single-object-encoded event), so the codec reads an archived event exactly as
it reads a live one, old schema versions included.

Archiving is a copy, idempotent and incremental: a partition is read from the
offset after the last one already archived up to the first record at or after
the cut-off. The file names alone say what is archived, so the next run, a
replay or a rebuild needs no other state. Deleting from Kafka stays the
brokers' retention job.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import fastavro

from parley.settings import KafkaSettings
from schemas.catalog import POOLS
from tools.analysts import logread
from tools.analysts.location import Location

#: What `parley archive` copies by default: what replay and rebuild read.
DEFAULT_TOPICS: tuple[str, ...] = (
    "chat.events",
    "chat.inference",
    *(f"chat.inference.{p}" for p in POOLS),
    "chat.usage",
    "user.memory",
)
MAX_PER_FILE = 100_000

SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ArchivedRecord",
        "namespace": "parley.archive",
        "doc": "One Kafka record of a Parley topic, value bytes unchanged (Avro single-object encoding)",
        "fields": [
            {"name": "partition", "type": "int"},
            {"name": "offset", "type": "long"},
            {"name": "timestamp_ms", "type": "long"},
            {"name": "key", "type": ["null", "bytes"], "default": None},
            {"name": "value", "type": ["null", "bytes"], "default": None},
        ],
    }
)

_NAME = re.compile(r"^(?P<topic>[^/]+)/(?P<day>\d{4}-\d{2}-\d{2})/p(?P<p>\d+)-(?P<first>\d+)-(?P<last>\d+)\.avro$")


@dataclass(frozen=True, order=True)
class Segment:
    """One archive file, as its name describes it."""

    topic: str
    partition: int
    first: int
    last: int
    day: str
    path: str


def day_of(timestamp_ms: int) -> str:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


def segment_path(topic: str, day: str, partition: int, first: int, last: int) -> str:
    return f"{topic}/{day}/p{partition:03d}-{first:012d}-{last:012d}.avro"


def segments(location: Location, topic: str) -> dict[int, list[Segment]]:
    """The topic's archive files by partition, in offset order."""
    out: dict[int, list[Segment]] = {}
    for path in location.files(topic):
        m = _NAME.match(path)
        if m is None or m["topic"] != topic:
            continue  # temporary or foreign files
        seg = Segment(topic, int(m["p"]), int(m["first"]), int(m["last"]), m["day"], path)
        out.setdefault(seg.partition, []).append(seg)
    for segs in out.values():
        segs.sort(key=lambda s: (s.first, s.last))
    return out


def read_segment(location: Location, seg: Segment) -> Iterator[logread.Raw]:
    with location.open(seg.path) as f:
        for rec in fastavro.reader(f, reader_schema=SCHEMA):
            yield logread.Raw(seg.topic, rec["partition"], rec["offset"], rec["timestamp_ms"], rec["key"], rec["value"])


def encode_segment(topic: str, records: list[logread.Raw]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(
        buf,
        SCHEMA,
        (
            {"partition": r.partition, "offset": r.offset, "timestamp_ms": r.timestamp_ms, "key": r.key, "value": r.value}
            for r in records
        ),
        codec="deflate",
        metadata={"parley.topic": topic},
    )
    return buf.getvalue()


@dataclass
class ArchiveReport:
    cutoff_ms: int
    records: dict[str, int] = field(default_factory=dict)  # topic → records copied by this run
    files: list[str] = field(default_factory=list)


def archive(
    kafka: KafkaSettings,
    location: Location,
    cutoff_ms: int,
    topics: tuple[str, ...] = DEFAULT_TOPICS,
    on_batch: Callable[[int], None] | None = None,
) -> ArchiveReport:
    """Copy every record with a timestamp before ``cutoff_ms`` that is not archived yet."""
    report = ArchiveReport(cutoff_ms)
    consumer = logread.reader(kafka)
    try:
        for topic in topics:
            done = {p: segs[-1].last for p, segs in segments(location, topic).items() if segs}
            spans = logread.plan(consumer, kafka, [topic], None, cutoff_ms - 1)
            starts = {(topic, p): last + 1 for p, last in done.items()}
            pending: dict[tuple[int, str], list[logread.Raw]] = {}
            report.records[topic] = 0

            def flush(key: tuple[int, str]) -> None:
                records = pending.pop(key)
                path = segment_path(topic, key[1], key[0], records[0].offset, records[-1].offset)
                location.write(path, encode_segment(topic, records))
                report.files.append(path)

            for raw in logread.read(consumer, kafka, spans, starts=starts, on_batch=on_batch):
                key = (raw.partition, day_of(raw.timestamp_ms))
                for other in [k for k in pending if k[0] == raw.partition and k != key]:
                    flush(other)  # the partition moved on to the next day
                pending.setdefault(key, []).append(raw)
                report.records[topic] += 1
                if len(pending[key]) >= MAX_PER_FILE:
                    flush(key)
            for key in list(pending):
                flush(key)
    finally:
        consumer.close()
    return report
