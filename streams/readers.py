"""The streams' readers of compacted topics, each read whole from the beginning outside any group.

Every router instance needs every worker's heartbeat, and every context builder
every user's memory (and every gateway the running experiments), so none may share a group's partitions; a restart reads
the topic again from the start (compaction keeps it small). Blocking: call
``poll`` from a thread. What they fold into is pure: ``streams.fleet.Fleet``
for heartbeats; the newest snapshot per user for memory.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from parley.consumer import reached, read_events, reader, watermarks
from parley.errors import BrokerUnavailable
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS
from schemas.events import Event, MemoryUpdated, WorkerHeartbeat
from streams import fleet, memory
from streams.experiments import Running


def _whole(kafka: KafkaSettings, topic: str, purpose: str) -> Consumer:
    consumer = reader(kafka, purpose)
    name = kafka.topic(topic)
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS[topic].partitions)])
    return consumer


class HeartbeatReader:
    def __init__(self, kafka: KafkaSettings) -> None:
        self._consumer = _whole(kafka, fleet.TOPIC, "fleet")

    def poll(self, timeout: float = 0.5, max_records: int = 500) -> list[WorkerHeartbeat]:
        return read_events(self._consumer, WorkerHeartbeat, max_records, timeout, "heartbeat")[0]

    def close(self) -> None:
        self._consumer.close()


class MemoryReader:
    """Every user's latest memory; ``of(user)`` answers from it without waiting on anything."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.facts: dict[str, tuple[int, list[str]]] = {}  # user → (occurred_at, texts)
        self._consumer = _whole(kafka, memory.TOPIC, "memory")
        self._topic = kafka.topic(memory.TOPIC)

    def poll(self, timeout: float = 0.5) -> int:
        events, _ = read_events(self._consumer, MemoryUpdated, 500, timeout, "memory")
        for event in events:
            known = self.facts.get(event.user_id)
            if known is None or known[0] <= event.occurred_at:
                self.facts[event.user_id] = (event.occurred_at, [f.text for f in event.facts])
        return len(events)

    def of(self, user_id: str) -> list[str]:
        return list(self.facts.get(user_id, (0, []))[1])

    def latest(self, user_id: str, timeout_s: float) -> list[str]:
        """The user's memory as committed now: their partition read to its end first, so a change is made
        to the snapshot a moment ago's change left (the tool executor's remember/forget; the Cassandra
        projection may not have caught up yet). BrokerUnavailable after ``timeout_s``."""
        tp = TopicPartition(self._topic, partition_for(user_id, TOPICS[memory.TOPIC].partitions))
        deadline = time.monotonic() + timeout_s
        try:
            low, high = watermarks(self._consumer, tp, timeout_s)
        except KafkaException as exc:
            raise BrokerUnavailable(f"user.memory's end unknown (PARLEY_KAFKA_BOOTSTRAP): {exc}") from exc
        while high > low and not reached(self._consumer, {(tp.topic, tp.partition): high}):
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading user.memory to its end took over {timeout_s:.0f} s")
            self.poll(0.2)
        return self.of(user_id)

    def close(self) -> None:
        self._consumer.close()


EXPERIMENTS = "ops.experiments"


class ExperimentReader:
    """The running experiments (``streams.experiments.Running``), folded from ``ops.experiments`` read whole."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.running = Running()
        self._consumer = _whole(kafka, EXPERIMENTS, "experiments")
        self._topic = kafka.topic(EXPERIMENTS)

    def poll(self, timeout: float = 0.5) -> int:
        events, _ = read_events(self._consumer, Event, 100, timeout, "experiment")
        self.running.apply_all(events)
        return len(events)

    def to_end(self, timeout_s: float) -> Running:
        """The running set as committed now: the topic read to its end. BrokerUnavailable after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        ends = {}
        try:
            for p in range(TOPICS[EXPERIMENTS].partitions):
                low, high = watermarks(self._consumer, TopicPartition(self._topic, p), timeout_s)
                if high > low:
                    ends[(self._topic, p)] = high
        except KafkaException as exc:
            raise BrokerUnavailable(f"ops.experiments' end unknown (PARLEY_KAFKA_BOOTSTRAP): {exc}") from exc
        while len(reached(self._consumer, ends)) < len(ends):
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading ops.experiments to its end took over {timeout_s:.0f} s")
            self.poll(0.2)
        return self.running

    def close(self) -> None:
        self._consumer.close()
