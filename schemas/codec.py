"""Step two of serialisation: record ↔ bytes, as Avro single-object encoding.

    C3 01 | 8-byte CRC-64-AVRO fingerprint (little-endian) | Avro binary body

Any reader finds the writer's schema from the fingerprint: the fingerprint →
schema map is built from the ``.avsc`` files, the current ones
(``schemas/avro/``) and every earlier released version
(``schemas/avro/released/``). A fingerprint newer than the reader (a writer
upgraded first, in a rolling deploy) is looked up in the installed
``SchemaSource`` (``parley.schema_registry``: the ``schemas`` topic every writer
publishes its schemas to before it writes). Events of any version are read
through Avro schema resolution into the reader's current type, so processors
only ever see their own types and deploy order does not matter.

Errors (all subclasses of ``CodecError``; a consumer dead-letters on them)::

    CodecError
     ├── NotSingleObject   the bytes lack the C3 01 marker or are too short
     ├── UnknownSchema     the fingerprint is in no .avsc file we have, nor in the source
     ├── Undecodable       the body does not parse with the writer's schema
     └── InvalidEvent      it parses, but breaks a rule of the event type

A data key that cannot be read while sealing or opening raises the key
service's ``KeyUnavailable`` (``parley.errors.Unavailable``), never a
``CodecError``: the record is good, the read is to be retried. On an event
loop use ``decode_async``/``encode_async``: they fetch the keys first, off the
loop, and the synchronous step then finds them held.
"""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import fastavro
from fastavro.schema import fingerprint as _fingerprint
from fastavro.schema import to_parsing_canonical_form

from schemas import sealing
from schemas.events import EVENT_TYPES, Event
from schemas.records import from_record, to_record

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8
AVRO_DIR = Path(__file__).parent / "avro"
RELEASED_DIR = AVRO_DIR / "released"


class CodecError(Exception):
    """An event could not be turned into bytes or back."""


class NotSingleObject(CodecError):
    pass


class UnknownSchema(CodecError):
    pass


class Undecodable(CodecError):
    pass


class InvalidEvent(CodecError):
    pass


def fingerprint(schema: dict[str, Any]) -> bytes:
    """CRC-64-AVRO of the parsing canonical form, in the byte order the wire uses."""
    return bytes.fromhex(_fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


@dataclass(frozen=True)
class _Known:
    name: str
    parsed: Any  # fastavro's parsed schema


class SchemaSource(Protocol):
    """Where a writer's schema is found by its fingerprint when no .avsc file of ours has it."""

    def lookup(self, fp: bytes) -> dict[str, Any] | None: ...


_source: SchemaSource | None = None


def install_source(source: SchemaSource | None) -> None:
    """The process's source of schemas newer than its own (None: only the .avsc files)."""
    global _source
    _source = source


@dataclass(frozen=True)
class SchemaSet:
    """The fingerprint → schema map, and the current schema of each event."""

    by_fingerprint: dict[bytes, _Known]
    current: dict[str, tuple[bytes, Any]]  # event name → (fingerprint, parsed schema)

    def known(self, fp: bytes) -> _Known | None:
        """The schema written under ``fp``: ours, or learnt from the installed source (and kept)."""
        found = self.by_fingerprint.get(fp)
        if found is not None or _source is None:
            return found
        raw = _source.lookup(fp)
        if raw is None or fingerprint(raw) != fp or raw.get("name") not in self.current:
            return None  # a schema that is not what it claims, or of an event this binary does not have
        try:
            learnt = _Known(raw["name"], fastavro.parse_schema(raw, named_schemas={}))
        except Exception:  # fastavro.SchemaParseException and the like: not a schema
            return None
        self.by_fingerprint[fp] = learnt
        return learnt

    def to_learn(self, data: bytes | None) -> bytes | None:
        """The record's writer fingerprint when it is not known yet and a source could say (else None)."""
        if _source is None or data is None or len(data) < HEADER_LEN or data[:2] != MAGIC:
            return None
        fp = bytes(data[2:HEADER_LEN])
        return None if fp in self.by_fingerprint else fp

    @classmethod
    def load(cls, avro_dir: Path = AVRO_DIR, released_dir: Path = RELEASED_DIR) -> SchemaSet:
        by_fp: dict[bytes, _Known] = {}
        current: dict[str, tuple[bytes, Any]] = {}
        for path, is_current in [(p, True) for p in sorted(avro_dir.glob("*.avsc"))] + [
            (p, False) for p in sorted(released_dir.glob("*.avsc"))
        ]:
            raw = json.loads(path.read_text())
            fp = fingerprint(raw)
            parsed = fastavro.parse_schema(raw, named_schemas={})
            by_fp[fp] = _Known(raw["name"], parsed)
            if is_current:
                current[raw["name"]] = (fp, parsed)
        missing = set(EVENT_TYPES) - set(current)
        if missing:
            raise CodecError(f"no .avsc in {avro_dir} for {sorted(missing)}; run `parley schemas write`")
        return cls(by_fp, current)


@cache
def default_schemas() -> SchemaSet:
    return SchemaSet.load()


def encode(event: Event, schemas: SchemaSet | None = None) -> bytes:
    """An event as single-object-encoded bytes under its current schema."""
    schemas = schemas or default_schemas()
    fp, parsed = schemas.current[type(event).__name__]
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(fp)
    try:
        record = to_record(event)
        sealing.seal_record(type(event), record)
        fastavro.schemaless_writer(buf, parsed, record)
    except (ValueError, TypeError) as exc:
        raise InvalidEvent(f"{type(event).__name__} does not fit its schema: {exc}") from exc
    return buf.getvalue()


def decode(data: bytes | None, schemas: SchemaSet | None = None) -> Event:
    """Bytes written under any known version of an event, as the current event type."""
    cls, record = _read(data, schemas or default_schemas())
    return _event(cls, record)


async def decode_async(data: bytes | None, schemas: SchemaSet | None = None) -> Event:
    """``decode`` for code on an event loop: the keys of the record's sealed values, and of its user
    (whose rows the consumer may read next), are fetched off the loop before they are opened."""
    schemas = schemas or default_schemas()
    unknown = schemas.to_learn(data)
    if unknown is not None:
        await asyncio.to_thread(schemas.known, unknown)  # a read of the schemas topic: off the loop
    cls, record = _read(data, schemas)
    owners = sealing.owners(cls, record)
    if isinstance(record.get("user_id"), str):
        owners.add(record["user_id"])
    await sealing.prefetch(owners)
    return _event(cls, record)


async def encode_async(event: Event, schemas: SchemaSet | None = None) -> bytes:
    """``encode`` for code on an event loop: the owner's key is fetched (or made) off the loop first."""
    if sealing.holds_sealed(type(event)):
        await sealing.prefetch([getattr(event, "user_id", "")], create=True)
    return encode(event, schemas)


def unopened(data: bytes | None, schemas: SchemaSet | None = None) -> tuple[type[Event], dict[str, Any]]:
    """The event type and record of ``data``, its sealed values left sealed (``CodecError`` when it does
    not parse): for looking at bad input a DLQ keeps without trusting it further."""
    return _read(data, schemas or default_schemas())


def owner(data: bytes | None, schemas: SchemaSet | None = None) -> str:
    """The ``user_id`` a record names, read without opening anything; '' when it has none or does not
    parse that far (bad input a DLQ keeps: whose it is decides whose key seals what is said about it)."""
    try:
        _, record = unopened(data, schemas)
    except CodecError:
        return ""
    user_id = record.get("user_id")
    return user_id if isinstance(user_id, str) else ""


def _read(data: bytes | None, schemas: SchemaSet) -> tuple[type[Event], dict[str, Any]]:
    """The event type and its record, resolved to the current schema and still sealed."""
    if data is None or len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise NotSingleObject("not Avro single-object encoding (missing C3 01 header)")
    known = schemas.known(bytes(data[2:HEADER_LEN]))
    if known is None:
        raise UnknownSchema(f"unknown schema fingerprint {bytes(data[2:HEADER_LEN]).hex()}")
    if known.name not in schemas.current:
        raise UnknownSchema(f"event type {known.name} is no longer known")
    current_fp, reader = schemas.current[known.name]
    if current_fp == bytes(data[2:HEADER_LEN]):
        reader = None  # same schema: skip resolution
    body = io.BytesIO(data[HEADER_LEN:])
    try:
        record = fastavro.schemaless_reader(body, known.parsed, reader)
    except Exception as exc:  # fastavro raises a mix of EOFError, ValueError, IndexError, UnicodeDecodeError
        raise Undecodable(f"{known.name} body does not parse: {type(exc).__name__}") from exc
    if body.read(1):
        raise Undecodable(f"{known.name} body has trailing bytes")
    return EVENT_TYPES[known.name], record


def _event(cls: type[Event], record: dict[str, Any]) -> Event:
    try:
        sealing.open_record(cls, record)
    except sealing.Unopenable as exc:  # a value moved in from another field or event: bad input
        raise InvalidEvent(f"{cls.__name__}: {exc}") from exc
    try:
        return from_record(cls, record)
    except (ValueError, TypeError) as exc:
        raise InvalidEvent(f"{cls.__name__}: {exc}") from exc
