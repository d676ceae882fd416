from __future__ import annotations

import dataclasses

import pytest

from schemas.catalog import POOLS, SCHEMAS, TOPICS, inference_topic, topic_name_for, topics_for
from schemas.events import EVENT_TYPES, DeadLetter, InferenceRequested, InferenceRouted, TokenChunk


def test_every_event_type_has_a_home_topic_and_only_routed_requests_have_several() -> None:
    for name, cls in EVENT_TYPES.items():
        homes = {t.name for t in topics_for(cls)}
        if cls is DeadLetter:
            assert homes == set()
        elif cls is InferenceRouted:
            assert homes == {inference_topic(p) for p in POOLS}
        else:
            assert len(homes) == 1, (name, homes)


def test_events_are_produced_to_their_topic() -> None:
    chunk = TokenChunk(conversation_id="c", user_id="u", request_id="r", seq=0)
    assert topic_name_for(chunk) == "chat.tokens"
    req = InferenceRequested(conversation_id="c", user_id="u", request_id="r", parent_id="p")
    routed = InferenceRouted(conversation_id="c", user_id="u", request=req, pool="medium", model="m", partition=0)
    assert topic_name_for(routed) == "chat.inference.medium"
    with pytest.raises(KeyError):
        topic_name_for(DeadLetter(source_topic="t", source_partition=0, source_offset=0, error_type="x", error="y"))


def test_every_topic_has_a_dlq_and_keys_by_a_field_of_its_events() -> None:
    for topic in TOPICS.values():
        if topic.name.endswith(".dlq") or topic is SCHEMAS:  # schemas are not events: nothing is dead-lettered
            continue
        assert topic.dlq in TOPICS
        for cls in topic.events:
            assert cls.key_field == topic.key
            assert topic.key in {f.name for f in dataclasses.fields(cls)}


def test_catalog_matches_the_design() -> None:
    assert TOPICS["chat.events"].retention_ms == -1
    assert TOPICS["fleet.heartbeats"].configs["cleanup.policy"] == "compact"
    assert TOPICS["chat.usage"].key == "user_id"
    assert TOPICS["chat.events.dlq"].retention_ms == 30 * 24 * 3_600_000
    assert {inference_topic(p) for p in POOLS} <= set(TOPICS)
