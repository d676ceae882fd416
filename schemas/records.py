"""Step one of serialisation: event ↔ record (plain dict), and event type → Avro schema.

The Avro schema of an event is derived from its dataclass (field order, types,
defaults and docs), so the Python types and the ``.avsc`` files cannot disagree
without a test noticing. Step two (record ↔ bytes) is ``codec.py``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, Union

from schemas.events import NAMESPACE

_PRIMITIVES: dict[Any, str] = {str: "string", int: "long", float: "double", bool: "boolean", bytes: "bytes"}


def _optional_inner(tp: Any) -> Any | None:
    """``X`` when ``tp`` is ``X | None``, else None."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
        raise TypeError(f"only `X | None` unions are supported, got {tp}")
    return None


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def avro_schema(cls: type) -> dict[str, Any]:
    """The Avro record schema of a dataclass, with nested records defined inline once."""
    return _record(cls, set())


def _record(cls: type, seen: set[str]) -> dict[str, Any] | str:  # type: ignore[return]
    full_name = f"{NAMESPACE}.{cls.__name__}"
    if full_name in seen:
        return full_name
    seen.add(full_name)
    out_fields = []
    for f in dataclasses.fields(cls):
        entry: dict[str, Any] = {"name": f.name, "type": _type(_hints(cls)[f.name], seen)}
        if "doc" in f.metadata:
            entry["doc"] = f.metadata["doc"]
        default = _default(f)
        if default is not dataclasses.MISSING:
            entry["default"] = default
        out_fields.append(entry)
    schema: dict[str, Any] = {"type": "record", "name": cls.__name__, "namespace": NAMESPACE}
    if cls.__doc__:
        schema["doc"] = " ".join(cls.__doc__.split())
    schema["fields"] = out_fields
    return schema


def _type(tp: Any, seen: set[str]) -> Any:
    inner = _optional_inner(tp)
    if inner is not None:
        return ["null", _type(inner, seen)]
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": _type(item, seen)}
    if dataclasses.is_dataclass(tp):
        return _record(tp, seen)  # type: ignore[arg-type]
    raise TypeError(f"no Avro mapping for {tp}")


def _default(f: dataclasses.Field[Any]) -> Any:
    """The Avro default of a field: only fields with a Python default get one."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        if f.name in ("event_id", "occurred_at"):
            return dataclasses.MISSING  # generated per event, not a schema default
        value = f.default_factory()
        return to_record(value) if dataclasses.is_dataclass(value) else value
    return dataclasses.MISSING


# ------------------------------------------------------------------- records
# Converters are planned once per class: events are converted on every hop, and
# dataclasses.asdict / per-call type inspection cost several times the Avro work.

Convert = Any  # Callable[[Any], Any] | None: None means "the value as it is"


def to_record(event: Any) -> dict[str, Any]:
    """A dataclass instance as the plain dict fastavro writes (nested records become dicts)."""
    out = {}
    for name, conv in _to_plan(type(event)):
        value = getattr(event, name)
        out[name] = value if conv is None or value is None else conv(value)
    return out


@cache
def _to_plan(cls: type) -> tuple[tuple[str, Convert], ...]:
    return tuple((f.name, _to_converter(_hints(cls)[f.name])) for f in dataclasses.fields(cls))


def _to_converter(tp: Any) -> Convert:
    tp = _optional_inner(tp) or tp
    if dataclasses.is_dataclass(tp):
        return to_record
    if typing.get_origin(tp) is list:
        item = _to_converter(typing.get_args(tp)[0])
        return None if item is None else (lambda values: [item(v) for v in values])
    return None


def from_record(cls: type, record: dict[str, Any]) -> Any:
    """Rebuild ``cls`` from a record read with ``cls``'s own schema as reader."""
    kwargs = {}
    for name, conv in _from_plan(cls):
        if name in record:
            value = record[name]
            kwargs[name] = value if conv is None or value is None else conv(value)
    return cls(**kwargs)


@cache
def _from_plan(cls: type) -> tuple[tuple[str, Convert], ...]:
    return tuple((f.name, _from_converter(_hints(cls)[f.name])) for f in dataclasses.fields(cls))


def _from_converter(tp: Any) -> Convert:
    tp = _optional_inner(tp) or tp
    if dataclasses.is_dataclass(tp):
        return lambda value: from_record(tp, value)  # type: ignore[arg-type]
    if typing.get_origin(tp) is list:
        item = _from_converter(typing.get_args(tp)[0])
        return None if item is None else (lambda values: [item(v) for v in values])
    return None
