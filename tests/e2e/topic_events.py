"""Reading one turn's events off a stack's topic, for e2e tests that check what the pipeline actually carried."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from parley.settings import KafkaSettings
from schemas import codec
from schemas.catalog import TOPICS

DEADLINE_S = 90.0


def events_of(kafka: KafkaSettings, topic: str, kind: type, request_id: str, done: Any) -> list[Any]:
    """The ``kind`` events of ``request_id`` on ``topic``, read until ``done(events)`` holds (a deadline fails)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"e2e-read-{uuid.uuid4().hex[:6]}"})
    name = kafka.topic(topic)
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS[topic].partitions)])
    found: dict[str, Any] = {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not done(list(found.values())):
            assert time.monotonic() < deadline, f"the {kind.__name__}s of {request_id} never came: {list(found.values())}"
            for msg in consumer.consume(500, 0.5):
                if msg.error() or msg.value() is None:
                    continue
                event = codec.decode(msg.value())
                if isinstance(event, kind) and event.request_id == request_id:
                    found[event.event_id] = event  # a check repeated after a restart has the same id
        return list(found.values())
    finally:
        consumer.close()
