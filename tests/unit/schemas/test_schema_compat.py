"""The .avsc files match the event types, and every change stays compatible with released versions."""

from __future__ import annotations

import copy
import io
import json

import fastavro
import pytest

from schemas import avsc, codec
from schemas.compat import incompatibilities
from schemas.events import EVENT_TYPES
from schemas.records import avro_schema


def test_avsc_files_match_the_event_types() -> None:
    assert avsc.drift() == [], "run `parley schemas write` and commit the result"


def _released() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(codec.RELEASED_DIR.glob("*.avsc")):
        out.append((path.name, json.loads(path.read_text())))
    return out


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_current_schema_is_compatible_with_every_released_version(name: str) -> None:
    current = avro_schema(EVENT_TYPES[name])
    for filename, old in _released():
        if old["name"] != name:
            continue
        assert incompatibilities(old, current) == [], f"new readers cannot read events written under {filename}"
        assert incompatibilities(current, old) == [], f"readers still on {filename} cannot read new events"


# The checker itself must catch the breaking changes the rule forbids.

BASE = avro_schema(EVENT_TYPES["GenerationCompleted"])


def _with(change) -> dict:
    schema = copy.deepcopy(BASE)
    change(schema["fields"])
    return schema


def test_adding_a_field_with_a_default_is_compatible_both_ways() -> None:
    new = _with(lambda f: f.append({"name": "latency_ms", "type": "double", "default": 0.0}))
    assert incompatibilities(BASE, new) == []
    assert incompatibilities(new, BASE) == []


def test_adding_a_field_without_a_default_breaks_old_data() -> None:
    new = _with(lambda f: f.append({"name": "latency_ms", "type": "double"}))
    assert incompatibilities(BASE, new)


def test_removing_a_field_without_a_default_breaks_old_readers() -> None:
    new = _with(lambda f: f.remove(next(x for x in f if x["name"] == "request_id")))
    assert incompatibilities(new, BASE)


def test_retyping_a_field_breaks_both_ways() -> None:
    def retype(fields: list) -> None:
        next(x for x in fields if x["name"] == "content")["type"] = "long"

    new = _with(retype)
    assert incompatibilities(BASE, new) and incompatibilities(new, BASE)


def test_making_a_field_nullable_breaks_old_readers_only() -> None:
    def nullable(fields: list) -> None:
        field = next(x for x in fields if x["name"] == "content")
        field["type"], field["default"] = ["null", "string"], None

    new = _with(nullable)
    assert incompatibilities(BASE, new) == []
    assert incompatibilities(new, BASE)


def test_the_checker_agrees_with_fastavro_resolution() -> None:
    """Cross-check on real bytes: what the checker accepts, fastavro can resolve, and vice versa."""
    record = {"conversation_id": "c", "user_id": "u", "request_id": "r", "parent_id": "p", "finish_reason": "stop", "event_id": "e", "occurred_at": 1}
    cases = {
        "compatible": _with(lambda f: f.append({"name": "latency_ms", "type": "double", "default": 0.0})),
        "breaking": _with(lambda f: f.append({"name": "latency_ms", "type": "double"})),
    }
    for label, reader in cases.items():
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(BASE, named_schemas={}), record)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, fastavro.parse_schema(BASE, named_schemas={}), fastavro.parse_schema(reader, named_schemas={}))
            resolvable = True
        except Exception:
            resolvable = False
        assert resolvable == (incompatibilities(BASE, reader) == []), label
