"""A log record's body as the plain dict Avro reads it into, for folds that need no event objects.

``schemas.codec.decode`` turns bytes into a frozen event: fastavro reads the body into a
dict, then ``schemas.records.from_record`` builds the dataclasses, nested ones and every
``PromptMessage`` of a prompt included. For a replay that build is two thirds of the
decoding time, and the fold only reads a few fields back out. ``Decoder`` stops at the
dict: the same bytes, the same errors (``codec.CodecError`` and its subclasses, the
events' own rules included), a record of a type the caller did not ask for never read.

A record written under an earlier released schema goes the long way (``codec.decode``,
schema resolution into the current type, then ``to_record``), so the dict always has the
current type's fields; those records are few, and resolution is what they need anyway.

Where a caller needs only a record's leading fields most of the time (a replay needs an
InferenceRequested's prompt only for a turn that was never routed: the routed copy carries
the same prompt), ``heads`` names them: the record is read only that far, into a ``Head``
holding its bytes, and ``Decoder.whole`` reads the rest when it is wanted after all.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import fastavro

from schemas import codec, sealing
from schemas import events as ev
from schemas.records import to_record

Record = dict[str, Any]


def _allowed(field: str, allowed: frozenset[str]) -> Callable[[Record], None]:
    def check(record: Record) -> None:
        value = record[field]
        if value is not None and value not in allowed:
            raise codec.InvalidEvent(f"{field} must be one of {sorted(allowed)}, got {value!r}")

    return check


def _each(*rules: Callable[[Record], None]) -> Callable[[Record], None]:
    def check(record: Record) -> None:
        for rule in rules:
            rule(record)

    return check


#: The rules an event type checks in ``__post_init__``, applied to the dict instead. A type with a
#: rule not listed here is decoded the long way (see ``Decoder``), so a new rule is never skipped.
RULES: dict[type[ev.Event], Callable[[Record], None]] = {
    ev.MessagePosted: _allowed("role", ev.ROLES),
    ev.GenerationCompleted: _each(
        _allowed("finish_reason", ev.FINISH_REASONS), _allowed("citation_status", ev.CITATION_STATUSES)
    ),
    ev.GenerationModerated: _each(
        _allowed("direction", ev.MODERATION_DIRECTIONS),
        _allowed("stage", ev.MODERATION_STAGES),
        _allowed("action", ev.MODERATION_ACTIONS),
    ),
    ev.ToolCallDecided: _allowed("decision", ev.TOOL_DECISIONS),
    ev.ToolCallFinished: _allowed("outcome", ev.TOOL_OUTCOMES),
    ev.FeedbackGiven: _allowed("rating", ev.RATINGS),
}


def _checked_here(cls: type[ev.Event]) -> bool:
    """True when ``cls`` has no ``__post_init__`` of its own or one whose rule ``RULES`` repeats."""
    own = cls.__dict__.get("__post_init__")
    return own is None or cls in RULES


class Head(dict):  # type: ignore[type-arg]
    """The leading fields of a record, and the record's bytes (``value``) for ``Decoder.whole``."""

    __slots__ = ("value",)
    value: bytes


#: Avro types a head may read (True: a varint length and that many bytes of UTF-8; False: a zig-zag varint).
_HEAD_TYPES = {"long": False, "int": False, "string": True}


_Steps = tuple[tuple[str | None, bool], ...]


def _head_steps(parsed: Any, names: tuple[str, ...]) -> _Steps | None:
    """(field to keep or None, is a string) for each field up to the last of ``names``; None when a field on
    the way is of a type a head cannot step over (a union, a record, an array)."""
    steps: list[tuple[str | None, bool]] = []
    left = set(names)
    for f in parsed["fields"]:
        if not left:
            break
        if not isinstance(f["type"], str) or f["type"] not in _HEAD_TYPES:
            return None
        keep = f["name"] in left
        left.discard(f["name"])
        steps.append((f["name"] if keep else None, _HEAD_TYPES[f["type"]]))
    return None if left else tuple(steps)


def _read_head(value: bytes, steps: _Steps) -> Head:
    head = Head()
    pos = codec.HEADER_LEN
    for name, is_string in steps:
        b = value[pos]
        pos += 1
        n = b & 0x7F
        shift = 7
        while b & 0x80:
            b = value[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
        n = (n >> 1) ^ -(n & 1)
        if is_string:
            if n < 0 or pos + n > len(value):
                raise IndexError("string past the end")
            if name is not None:
                head[name] = value[pos : pos + n].decode()
            pos += n
        elif name is not None:
            head[name] = n
    head.value = value
    return head


class Decoder:
    """``decode(value)``: (event name, body as a dict) for the event types asked for, None for the rest.

    The type is told by the fingerprint alone, before anything is read, so None also for a record
    whose fingerprint is unknown (or that is too short to have one): a reader skipping other types
    undecoded cannot tell those from a type it does not want.
    """

    def __init__(
        self,
        wanted: Iterable[str],
        schemas: codec.SchemaSet | None = None,
        heads: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._schemas = schemas or codec.default_schemas()
        wanted = frozenset(wanted)
        by_name = {name: ev.EVENT_TYPES[name] for name in wanted}
        # fingerprint → (name, writer schema to read with (None: the long way), rule, head steps (None: whole))
        self._plan: dict[bytes, tuple[str, Any, Callable[[Record], None] | None, _Steps | None]] = {}
        for fp, known in self._schemas.by_fingerprint.items():
            if known.name not in wanted:
                continue
            cls = by_name[known.name]
            current_fp, _ = self._schemas.current.get(known.name, (None, None))
            fast = fp == current_fp and _checked_here(cls)
            head = (heads or {}).get(known.name)
            steps = _head_steps(known.parsed, head) if fast and head and cls not in RULES else None
            self._plan[fp] = (known.name, known.parsed if fast else None, RULES.get(cls), steps)

    def __call__(self, value: bytes | None) -> tuple[str, Record] | None:
        if value is None:
            return None
        plan = self._plan.get(bytes(value[2 : codec.HEADER_LEN]))
        if plan is None:
            return None
        if value[:2] != codec.MAGIC:
            raise codec.NotSingleObject("not Avro single-object encoding (missing C3 01 header)")
        name, parsed, rule, steps = plan
        if parsed is None:
            return name, to_record(codec.decode(value, self._schemas))
        if steps is not None:
            try:
                return name, _read_head(value, steps)
            except (IndexError, UnicodeDecodeError) as exc:
                raise codec.Undecodable(f"{name} body does not parse: {type(exc).__name__}") from exc
        return name, self._whole(name, parsed, rule, value)

    def whole(self, head: Head) -> Record:
        """Every field of the record ``head`` was read from; CodecError as a first whole read would raise."""
        name, parsed, rule, _ = self._plan[bytes(head.value[2 : codec.HEADER_LEN])]
        return self._whole(name, parsed, rule, head.value)

    def _whole(self, name: str, parsed: Any, rule: Callable[[Record], None] | None, value: bytes) -> Record:
        body = io.BytesIO(value)
        body.seek(codec.HEADER_LEN)
        try:
            record = fastavro.schemaless_reader(body, parsed, None)
        except Exception as exc:  # fastavro raises a mix of EOFError, ValueError, IndexError, UnicodeDecodeError
            raise codec.Undecodable(f"{name} body does not parse: {type(exc).__name__}") from exc
        if body.tell() != len(value):
            raise codec.Undecodable(f"{name} body has trailing bytes")
        if rule is not None:
            rule(record)
        try:
            sealing.open_record(ev.EVENT_TYPES[name], record)  # an erased user's content reads "[erased]"
        except sealing.Unopenable as exc:  # a value moved in from another field or event: bad input, as the codec says
            raise codec.InvalidEvent(f"{name}: {exc}") from exc
        return record  # type: ignore[no-any-return]
