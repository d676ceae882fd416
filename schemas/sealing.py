"""Sealed text: content encrypted under its owner's data key, wherever it is written (DESIGN.md §12).

A sealed value is a string, so sealing changes no schema::

    \\x00s2:<user_id>:<key version>:<base64url(nonce | AES-GCM ciphertext and tag)>

It names its owner and key; the gateway refuses NUL in text, so no plaintext a
user sends starts that way. A value is bound to its **place** (``at``): the
field or cell it was sealed for and the row it belongs to, e.g.
``MessagePosted.content/<event_id>`` or ``messages.content/<message_id>``
(``field_at``, ``cell_at``). Its reader names the same place, so a value copied
into another field, column or row of the same owner does not open
(``Unopenable``), and equal text in two places seals to unequal values even
deterministically. Values of the first format (``\\x00s1:``, bound to the owner
and key version only) are still on topics kept for good: they open wherever
they are read; nothing new is written in it.

Fields of events that hold content are marked ``sealed`` in ``schemas/events.py``;
the codec seals them on encode and opens them on decode (the place: the event
type, the field's path and the event id; so a sealed field is never renamed or
moved, or its values already on the log would not open), so what Kafka keeps
on disk is ciphertext and every consumer sees the text. Projections seal the content
columns they write (deterministically: a replay writes the same cells) and
readers open them. When the owner's key has been destroyed (an erasure) a
sealed value opens as ``ERASED``.

The cryptography lives in ``parley/keys.py`` (the key service, which a process
installs at start); this module only knows the format and which fields to
seal. Without an installed service nothing is sealed, and a sealed value
cannot be opened (an error, never ciphertext shown as text).

The calls here are synchronous, and a key the service does not hold is read
from Cassandra; code on an event loop awaits ``prefetch`` (the codec's
``decode_async``/``encode_async`` do) so that they never wait on it there.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, Union

#: What every value sealed now starts with: bound to owner, key version and place.
PREFIX = "\x00s2:"
#: The first format: bound to owner and key version only. Still opened (kept topics hold it), never written.
LEGACY_PREFIX = "\x00s1:"
#: The same for a file (an uploaded document's original): ``BYTES_PREFIX<user_id>:<version>:`` then the raw nonce and ciphertext.
BYTES_PREFIX = b"\x00s2b:"
LEGACY_BYTES_PREFIX = b"\x00s1b:"
#: What a sealed value reads as once its owner's key is destroyed.
ERASED = "[erased]"


class SealedWithoutKeys(RuntimeError):
    """A sealed value met a process that installed no key service."""


class Unopenable(ValueError):
    """A sealed value whose key exists but that does not open where it is read: it was sealed for another
    place (moved or copied from another field, column or row) or altered. Bad input, never shown as text."""


class Keys(Protocol):
    def seal(self, user_id: str, text: str, *, at: str, deterministic: bool = False) -> str: ...

    def open(self, value: str, *, at: str) -> str: ...

    def blind(self, user_id: str, term: str) -> str: ...

    def seal_bytes(self, user_id: str, data: bytes, *, at: str) -> bytes: ...

    def open_bytes(self, data: bytes, *, at: str) -> bytes: ...

    async def prefetch(self, user_ids: Iterable[str], *, create: bool = False) -> None: ...


_keys: Keys | None = None


def install(keys: Keys | None) -> None:
    """The process's key service (None: seal nothing)."""
    global _keys
    _keys = keys


def installed() -> Keys | None:
    return _keys


async def prefetch(user_ids: Iterable[str], *, create: bool = False) -> None:
    """Have the installed service hold the keys of ``user_ids`` (read off the loop); ``create``: make
    missing ones, before sealing. Raises the service's ``KeyUnavailable`` (a transient
    ``parley.errors.Unavailable``) when one cannot be read."""
    if _keys is not None:
        await _keys.prefetch(user_ids, create=create)


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and (value.startswith(PREFIX) or value.startswith(LEGACY_PREFIX))


def cell_at(table: str, column: str, row: object) -> str:
    """The place of a Cassandra cell: its table and column, and the row's id (a message id, a document id
    and page…): what its writer seals it for and its reader opens it at."""
    return f"{table}.{column}/{row}"


def field_at(event_type: str, path: str, event_id: str) -> str:
    """The place of an event's sealed field: the event type, the field's path (``citations.text`` for a
    nested one) and the event's id."""
    return f"{event_type}.{path}/{event_id}"


def owner_of(value: str) -> str:
    """The user id a sealed value names (either format: their prefixes are as long)."""
    return value[len(PREFIX) :].split(":", 1)[0]


@dataclass(frozen=True)
class Sealer:
    """What a pure core seals with, handed to it by its shell (never the process global: review Q1):
    the key service it was given, or None to seal nothing."""

    keys: Keys | None

    def seal(self, user_id: str, text: str | None, *, at: str, deterministic: bool = False) -> str | None:
        """``text`` sealed for ``user_id`` at the place ``at`` (unchanged when empty or without keys).
        ``deterministic``: the same text at the same place gives the same value (for projected cells, which
        replays rewrite). Text that only looks sealed is sealed like any other: code writes opened text,
        never sealed values, so an envelope here came from outside (a model's reply, a tool's result, a
        page) and kept as it was it would be opened as someone's value (Unopenable, or worse)."""
        if self.keys is None or not text:
            return text
        return self.keys.seal(user_id, text, at=at, deterministic=deterministic)

    def blind(self, user_id: str, term: str) -> str:
        """A term keyed by the owner's data key (HMAC): equal for equal terms, unreadable without the key
        (unchanged without keys)."""
        return term if self.keys is None else self.keys.blind(user_id, term)


#: Seals nothing: for cores run where content is not sealed (and tests of their plain output).
UNSEALED = Sealer(None)


def sealer() -> Sealer:
    """The process's key service as a ``Sealer``: what a shell hands its pure cores."""
    return Sealer(_keys)


def seal(user_id: str, text: str | None, *, at: str, deterministic: bool = False) -> str | None:
    """``sealer().seal``: for the I/O edges (codec, stores) that use the installed service directly."""
    return sealer().seal(user_id, text, at=at, deterministic=deterministic)


def open_text(value: str | None, *, at: str) -> str | None:
    """The text of a possibly sealed value read at the place ``at`` (``ERASED`` when its key is gone;
    ``Unopenable`` when it was sealed for another place)."""
    if not is_sealed(value):
        return value
    if _keys is None:
        raise SealedWithoutKeys("sealed content, but this process installed no key service (parley.keys.install)")
    return _keys.open(value, at=at)  # type: ignore[arg-type]


def seal_bytes(user_id: str, data: bytes, *, at: str) -> bytes:
    """A file's bytes sealed for ``user_id`` at the place ``at`` (unchanged without a key service)."""
    return data if _keys is None else _keys.seal_bytes(user_id, data, at=at)


def open_bytes(data: bytes, *, at: str) -> bytes:
    """A file's bytes, opened if sealed; a file whose owner was erased cannot be opened (ValueError)."""
    if not (data.startswith(BYTES_PREFIX) or data.startswith(LEGACY_BYTES_PREFIX)):
        return data
    if _keys is None:
        raise SealedWithoutKeys("a sealed file, but this process installed no key service (parley.keys.install)")
    return _keys.open_bytes(data, at=at)


def blind(user_id: str, term: str) -> str:
    """A search term as the index keeps it: keyed by the owner's data key (HMAC), so the index
    holds no words yet finds them (unchanged without a key service)."""
    return sealer().blind(user_id, term)


# ------------------------------------------------------------ event records


@cache
def _plan(cls: type) -> tuple[tuple[str, str, type | None], ...]:
    """(field, kind, nested type) for each field of ``cls`` that is or holds sealed text:
    kind ``text`` (a sealed string), ``one`` (a record that holds some) or ``many`` (a list of them)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("sealed"):
            out.append((f.name, "text", None))
            continue
        tp = hints[f.name]
        if typing.get_origin(tp) in (Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        kind = "one"
        if typing.get_origin(tp) is list:
            (tp,) = typing.get_args(tp)
            kind = "many"
        if dataclasses.is_dataclass(tp) and _plan(tp):
            out.append((f.name, kind, tp))
    return tuple(out)


def holds_sealed(cls: type) -> bool:
    return bool(_plan(cls))


def _walk(cls: type, record: dict[str, Any], change: typing.Callable[[str, str], str], path: str = "") -> None:
    """Call ``change(path, value)`` on every sealed value of ``record`` (``path``: the field's, dotted
    through nested records; list items share their list's) and keep what it returns."""
    for name, kind, nested in _plan(cls):
        value = record.get(name)
        if value is None:
            continue
        if kind == "text":
            if isinstance(value, str) and value:
                record[name] = change(path + name, value)
        elif kind == "one":
            _walk(nested, value, change, f"{path}{name}.")  # type: ignore[arg-type]
        else:
            for item in value:
                _walk(nested, item, change, f"{path}{name}.")  # type: ignore[arg-type]


def sealed_values(event: Any) -> list[str]:
    """The values of an event's sealed fields, nested ones included (as decoded: opened)."""
    out: list[str] = []
    _walk(type(event), dataclasses.asdict(event), lambda _, v: out.append(v) or v)  # type: ignore[func-returns-value]
    return out


def owners(cls: type, record: dict[str, Any]) -> set[str]:
    """The owners named by the sealed values of a decoded, not yet opened, record."""
    found: set[str] = set()
    if _plan(cls):
        _walk(cls, record, lambda _, v: found.add(owner_of(v)) or v if is_sealed(v) else v)  # type: ignore[func-returns-value]
    return found


def unsealed(cls: type, record: dict[str, Any]) -> int:
    """How many content fields of a decoded, not yet opened, record hold text in the clear (written with
    sealing off, or by a process without keys)."""
    found: list[str] = []
    if _plan(cls):
        _walk(cls, record, lambda _, v: v if is_sealed(v) else found.append(v) or v)  # type: ignore[func-returns-value]
    return len(found)


def seal_record(cls: type, record: dict[str, Any]) -> None:
    """Seal, in place, the content of an event's record for the event's ``user_id``, each value at its
    field's place (``field_at``). Every value, one shaped like a sealed envelope too: events carry opened
    text, never sealed values (a value opens only where it was sealed for), so such a value is text from
    outside, a model's or a tool's, which must come back as written, not be opened as a forgery."""
    keys = _keys
    if keys is None or not _plan(cls):
        return
    user_id, name, event_id = record["user_id"], cls.__name__, record["event_id"]
    _walk(cls, record, lambda path, text: keys.seal(user_id, text, at=field_at(name, path, event_id)))


def open_record(cls: type, record: dict[str, Any]) -> None:
    """Open, in place, the sealed content of a decoded record (``Unopenable``: a value that was sealed
    for another field or event)."""
    if _plan(cls):
        name, event_id = cls.__name__, record.get("event_id", "")
        _walk(cls, record, lambda path, value: open_text(value, at=field_at(name, path, event_id)) or "")
