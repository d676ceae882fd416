"""`parley replay`: the turns of a time range, read from the log (and the archive), written as JSONL or Parquet.

Reads ``chat.events``, ``chat.inference``, ``chat.inference.<pool>`` and ``chat.usage``
(``turns.TOPICS``) outside any consumer group. A turn belongs to the window by when it was
asked for (GenerationRequested); its other events come a little before (the user message)
or after (prompt, routing, completion, usage), so the topics are read from ``lead_s`` before
``since`` to ``grace_s`` after ``until``. Records of event types the fold does not use are
skipped by their schema fingerprint, without decoding; a conversation or user filter skips
records by key, and whole partitions where the key decides the partition. The rest are
decoded once, into the plain dicts Avro reads (``records.Decoder``): the fold reads a few
fields of each and never needs the event objects. An InferenceRequested is read only as far
as its attempt (``HEADS``), and whole only for a turn that was never routed; so a record
corrupt past that point counts as decoded unless its turn needs it.

The file ``write`` makes holds each turn's text (the user message, the prompt's messages,
the reply) sealed under the turn's owner, deterministically (the same log gives the same
file, byte for byte) and bound to its turn and field (``CONTENT``); ``load`` opens it. So a
replay file kept anywhere reads ``[erased]`` once its user is erased, as the log does. A
plain file (``write(…, sealing.UNSEALED)``, ``parley replay --plain``) is the analyst's to
delete: no erasure reaches it.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas import codec, sealing
from schemas.catalog import TOPICS
from tools.analysts import records, timeline, turns
from tools.analysts.location import Location
from tools.analysts.logread import Raw

log = logging.getLogger(__name__)

#: Records read only as far as these fields (``records.Head``): an InferenceRequested's prompt is needed only
#: for a turn never routed (InferenceRouted carries the same request), and is read then.
HEADS = {"InferenceRequested": ("event_id", "occurred_at", "request_id", "attempt")}

#: Topics whose producers place records by the default partitioner on this key (never an explicit partition).
_KEYED_BY_CONVERSATION = ("chat.events", "chat.inference")


@dataclass(frozen=True)
class Query:
    since_ms: int | None = None
    until_ms: int | None = None
    conversation_id: str | None = None
    user_id: str | None = None
    org_id: str | None = None  # only this organisation's turns (read whole: the log is not keyed by org)
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
    since, until = read_window(q)
    result = Result([], timeline.TimelineStats(), read_window_ms=(since, until))
    records_read = timeline.read(
        kafka, list(turns.TOPICS), since, until, location=location, partitions=_partitions(q), stats=result.stats,
        on_batch=on_batch, on_plan=on_plan,
    )
    with _no_cycle_collection():
        result.turns = _fold(records_read, q, result)
    return result


def _fold(read: Iterable[Raw], q: Query, result: Result) -> list[turns.Turn]:
    """The turns of ``read`` (counting into ``result``); the fold and its records are freed on return."""
    decode = records.Decoder(turns.NEEDED, heads=HEADS)

    def whole(head: records.Head) -> records.Record | None:
        try:
            return decode.whole(head)
        except codec.CodecError as exc:
            result.decoded -= 1
            _undecodable(result, exc, None)
            return None

    fold = turns.TurnFold(whole)
    wanted = _key_wanted(q)
    for raw in read:
        try:
            decoded = decode(raw.value) if wanted(raw.topic, raw.key) else None
        except codec.CodecError as exc:
            _undecodable(result, exc, raw)
            continue
        if decoded is None:
            result.skipped += 1
            continue
        result.decoded += 1
        fold.add_record(*decoded)
    return fold.turns(
        since_us=None if q.since_ms is None else q.since_ms * 1000,
        until_us=None if q.until_ms is None else q.until_ms * 1000,
        conversation_id=q.conversation_id,
        user_id=q.user_id,
        org_id=q.org_id,
    )


def _undecodable(result: Result, exc: codec.CodecError, raw: Raw | None) -> None:
    result.undecodable += 1
    where = {"topic": raw.topic, "partition": raw.partition, "offset": raw.offset} if raw is not None else {}
    log.warning("undecodable record skipped", extra={**where, "error": type(exc).__name__})


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector off while the fold grows: it holds every record it keeps, the
    records make no cycles, and each pass of the oldest generation would walk all of them again (a
    third of a replay's time at 60k records). Reference counting still frees what is dropped, the
    fold included, before collection resumes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
        # tool_calls: the trace of each call (turns.Turn), never its arguments or result
        "list[dict[str, Any]]": pa.list_(
            pa.struct(
                [("id", pa.string()), ("name", pa.string()), ("decision", pa.string()), ("rule", pa.string()),
                 ("started", pa.bool_()), ("outcome", pa.string()), ("error", pa.string())]
            )
        ),
    }
    return pa.schema([(f.name, by_annotation[str(f.type)]) for f in fields(turns.Turn)])


#: What ``json.dumps(r, ensure_ascii=False)`` uses, made once rather than for every line.
_JSON = json.JSONEncoder(ensure_ascii=False)


#: The text fields of a turn record: sealed in a replay file, each at ``replay.<field>/<request_id>``
#: (a prompt's messages at ``replay.prompt/<request_id>/<index>``).
CONTENT = ("user_message", "content")


def _texts(record: dict[str, Any], change: Callable[[str, str], str | None]) -> dict[str, Any]:
    """``record`` with each text changed by ``change(text, place)``: its content fields and prompt messages."""
    rid = record["request_id"]
    out = dict(record)
    for name in CONTENT:
        if out.get(name):
            out[name] = change(out[name], sealing.cell_at("replay", name, rid))
    if out.get("prompt"):
        out["prompt"] = [
            {**m, "content": change(m["content"], sealing.cell_at("replay", "prompt", f"{rid}/{i}"))} if m.get("content") else m
            for i, m in enumerate(out["prompt"])
        ]
    return out


def sealed(record: dict[str, Any], sealer: sealing.Sealer) -> dict[str, Any]:
    """A turn record with its texts sealed for its user (deterministically: a replay writes the same file)."""
    user = record["user_id"]
    return _texts(record, lambda text, at: sealer.seal(user, text, at=at, deterministic=True))


def opened(record: dict[str, Any]) -> dict[str, Any]:
    """A turn record read back: its sealed texts opened (``[erased]`` once its user is erased)."""
    return _texts(record, lambda text, at: sealing.open_text(text, at=at))


def write(records: list[dict[str, Any]], path: Path, sealer: sealing.Sealer | None = None) -> None:
    """Turn records to ``path``: Parquet when it ends in .parquet, else JSON lines (one turn a line). Their
    texts are sealed with ``sealer`` (default: the process's key service; ``sealing.UNSEALED``: plain)."""
    sealer = sealing.sealer() if sealer is None else sealer
    if sealer.keys is not None:
        records = [sealed(r, sealer) for r in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records, schema=_arrow_schema()), path)
        return
    encode = _JSON.encode
    with path.open("w", encoding="utf-8") as f:
        f.writelines(encode(r) + "\n" for r in records)


def load(path: Path, *, texts: bool = True) -> list[dict[str, Any]]:
    """Turn records from a file ``write`` made, their texts opened (``texts=False``: left as the file has
    them, for a reader of figures only, which needs no key service)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        with path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return [opened(r) for r in rows] if texts else rows
