"""A reader older than the writer: the codec learns the writer's schema from the installed source
(the ``schemas`` topic in a service; a dict here) and reads the record into its own type."""

from __future__ import annotations

import asyncio
import copy
import io
import json
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest

from schemas import codec
from schemas.events import MessagePosted
from schemas.records import to_record


class Source:
    def __init__(self, schemas: dict[bytes, dict[str, Any]]) -> None:
        self.schemas, self.asked = schemas, []

    def lookup(self, fp: bytes) -> dict[str, Any] | None:
        self.asked.append(fp)
        return self.schemas.get(fp)


def _current(name: str) -> dict[str, Any]:
    return json.loads((codec.AVRO_DIR / f"{name}.avsc").read_text())


def _future() -> dict[str, Any]:
    """MessagePosted as a later release writes it: one more field, with a default (what the
    compatibility test lets a release do)."""
    raw = copy.deepcopy(_current("MessagePosted"))
    raw["fields"].append({"name": "shiny_new_field", "type": "string", "default": ""})
    return raw


def _written(raw: dict[str, Any], event: MessagePosted, **extra: Any) -> bytes:
    buf = io.BytesIO()
    buf.write(codec.MAGIC + codec.fingerprint(raw))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(raw, named_schemas={}), {**to_record(event), **extra})
    return buf.getvalue()


EVENT = MessagePosted(conversation_id="c", user_id="u", message_id="m", parent_id=None, client_message_id="k", content="hi")


@pytest.fixture
def fresh() -> Iterator[codec.SchemaSet]:
    """A schema set of its own (learning adds to it), and no source installed afterwards."""
    yield codec.SchemaSet.load()
    codec.install_source(None)


def test_without_a_source_a_newer_schema_is_unknown(fresh: codec.SchemaSet) -> None:
    with pytest.raises(codec.UnknownSchema):
        codec.decode(_written(_future(), EVENT, shiny_new_field="x"), fresh)


def test_a_newer_schema_is_learnt_once_and_read_into_the_current_type(fresh: codec.SchemaSet) -> None:
    future = _future()
    source = Source({codec.fingerprint(future): future})
    codec.install_source(source)
    data = _written(future, EVENT, shiny_new_field="x")
    assert asyncio.run(codec.decode_async(data, fresh)) == EVENT  # looked up on a thread
    assert codec.decode(data, fresh) == EVENT
    assert source.asked == [codec.fingerprint(future)]  # held after the first lookup


def test_what_the_source_says_is_checked_against_the_fingerprint_and_the_event_types(fresh: codec.SchemaSet) -> None:
    future, other = _future(), _current("ConversationCreated")
    stranger = copy.deepcopy(future) | {"name": "NoSuchEvent"}
    codec.install_source(Source({
        codec.fingerprint(future): other,  # a schema filed under a fingerprint that is not its own
        codec.fingerprint(stranger): stranger,  # an event type this reader does not have
    }))  # fmt: skip
    for raw in (future, stranger):
        with pytest.raises(codec.UnknownSchema):
            codec.decode(_written(raw, EVENT, shiny_new_field="x"), fresh)
