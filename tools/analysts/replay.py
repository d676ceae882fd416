"""`parley replay`: the turns of a time range, read from the log (and the archive), written as JSONL or Parquet.

Reads ``chat.events``, ``chat.inference``, ``chat.inference.<pool>`` and ``chat.usage``
(``turns.TOPICS``) outside any consumer group. A turn belongs to the window by when it was
asked for (GenerationRequested); its other events come a little before (the user message)
or after (prompt, routing, completion, usage), so the topics are read from ``lead_s`` before
``since`` to ``grace_s`` after ``until``. Records of event types the fold does not use are
skipped by their schema fingerprint, without decoding; a conversation or user filter skips
records by key, and whole partitions where the key decides the partition.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas import codec
from schemas.catalog import TOPICS
from tools.analysts import timeline, turns
from tools.analysts.location import Location

log = logging.getLogger(__name__)

#: Topics whose producers place records by the default partitioner on this key (never an explicit partition).
_KEYED_BY_CONVERSATION = ("chat.events", "chat.inference")


@dataclass(frozen=True)
class Query:
    since_ms: int | None = None
    until_ms: int | None = None
    conversation_id: str | None = None
    user_id: str | None = None
    lead_s: float = 60.0  # read this much before ``since``: the user message precedes its request
    grace_s: float = 600.0  # and this much after ``until``: a turn's completion follows it


@dataclass
class Result:
    turns: list[turns.Turn]
    stats: timeline.TimelineStats
    decoded: int = 0
    skipped: int = 0  # records of other event types or keys, never decoded
    undecodable: int = 0
    read_window_ms: tuple[int | None, int | None] = (None, None)
    extra: dict[str, Any] = field(default_factory=dict)


def read_window(q: Query) -> tuple[int | None, int | None]:
    since = None if q.since_ms is None else q.since_ms - int(q.lead_s * 1000)
    until = None if q.until_ms is None else q.until_ms + int(q.grace_s * 1000)
    return since, until


def _partitions(q: Query) -> dict[str, set[int]] | None:
    out: dict[str, set[int]] = {}
    if q.conversation_id is not None:
        for t in _KEYED_BY_CONVERSATION:
            out[t] = {partition_for(q.conversation_id, TOPICS[t].partitions)}
    if q.user_id is not None:
        out["chat.usage"] = {partition_for(q.user_id, TOPICS["chat.usage"].partitions)}
    return out or None


def _key_wanted(q: Query) -> Callable[[str, bytes | None], bool]:
    cid = q.conversation_id.encode() if q.conversation_id is not None else None
    uid = q.user_id.encode() if q.user_id is not None else None

    def wanted(topic: str, key: bytes | None) -> bool:
        if topic == "chat.usage":
            return uid is None or key == uid
        return cid is None or key == cid

    return wanted


def replay(
    kafka: KafkaSettings,
    q: Query,
    *,
    location: Location | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> Result:
    schemas = codec.default_schemas()
    names = {fp: known.name for fp, known in schemas.by_fingerprint.items()}
    fold = turns.TurnFold()
    stats = timeline.TimelineStats()
    since, until = read_window(q)
    result = Result([], stats, read_window_ms=(since, until))
    wanted = _key_wanted(q)
    for raw in timeline.read(
        kafka, list(turns.TOPICS), since, until, location=location, partitions=_partitions(q), stats=stats,
        on_batch=on_batch, on_plan=on_plan,
    ):
        value = raw.value
        if value is None or names.get(bytes(value[2 : codec.HEADER_LEN])) not in turns.NEEDED or not wanted(raw.topic, raw.key):
            result.skipped += 1
            continue
        try:
            event = codec.decode(value, schemas)
        except codec.CodecError as exc:
            result.undecodable += 1
            where = {"topic": raw.topic, "partition": raw.partition, "offset": raw.offset, "error": type(exc).__name__}
            log.warning("undecodable record skipped", extra=where)
            continue
        result.decoded += 1
        fold.add(event)
    result.turns = fold.turns(
        since_us=None if q.since_ms is None else q.since_ms * 1000,
        until_us=None if q.until_ms is None else q.until_ms * 1000,
        conversation_id=q.conversation_id,
        user_id=q.user_id,
    )
    return result


# ------------------------------------------------------------------ files


def _arrow_schema() -> Any:
    import pyarrow as pa

    by_annotation = {
        "str": pa.string(),
        "str | None": pa.string(),
        "int": pa.int64(),
        "int | None": pa.int64(),
        "float | None": pa.float64(),
        "bool": pa.bool_(),
        "list[dict[str, str]]": pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
    }
    return pa.schema([(f.name, by_annotation[str(f.type)]) for f in fields(turns.Turn)])


def write(records: list[dict[str, Any]], path: Path) -> None:
    """Turn records to ``path``: Parquet when it ends in .parquet, else JSON lines (one turn a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records, schema=_arrow_schema()), path)
        return
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n")


def load(path: Path) -> list[dict[str, Any]]:
    """Turn records from a file ``write`` made."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
