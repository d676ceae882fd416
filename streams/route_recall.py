"""Read the router's earlier decisions back from the log (the Kafka side of ``streams.route_memory``).

A routed turn is an InferenceRouted on ``chat.inference.<pool>``; a shed one, a
``rejected`` GenerationCompleted on ``chat.events`` (only the router ends a turn
that way). Both are read from a time on, on every partition, outside any
consumer group, committed records only, to the end offsets of when it was asked.
It blocks: the router runs it in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from confluent_kafka import TopicPartition

from parley.consumer import reader, records_since
from parley.settings import KafkaSettings
from schemas import codec
from schemas.catalog import TOPICS, inference_topic
from schemas.events import Event, GenerationCompleted, InferenceRouted

#: A recall that takes longer fails (BrokerUnavailable), and the router tries again.
TIMEOUT_S = 30.0


def read_decisions(
    kafka: KafkaSettings, pools: Iterable[str], since: float, timeout_s: float = TIMEOUT_S
) -> list[tuple[Event, float]]:
    """The decisions on the log from ``since`` (wall clock, s) on, each with its record's time (s)."""
    since_ms = int(since * 1000)
    topics = [inference_topic(pool) for pool in pools] + ["chat.events"]
    starts = [TopicPartition(kafka.topic(t), p, since_ms) for t in topics for p in range(TOPICS[t].partitions)]
    consumer = reader(kafka, "router-recall")
    try:
        found: list[tuple[Event, float]] = []
        for msg in records_since(consumer, starts, timeout_s):
            try:
                event = codec.decode(msg.value())
            except codec.CodecError:
                continue  # its own consumers dead-letter it; it is nobody's decision
            if isinstance(event, InferenceRouted):
                event = replace(event, request=replace(event.request, messages=[]))
            elif not (isinstance(event, GenerationCompleted) and event.finish_reason == "rejected"):
                continue
            found.append((event, msg.timestamp()[1] / 1000))
        return found
    finally:
        consumer.close()
