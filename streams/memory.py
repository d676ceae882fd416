"""User memory: the projection of ``MemoryUpdated`` snapshots (pure) and a reader of ``user.memory``.

Each MemoryUpdated carries the user's whole memory, so its projection replaces
the user's rows: a partition delete one microsecond before the event, then the
facts at the event's timestamp. Replayed in any order the newest snapshot wins:
a newer delete shadows every older fact whenever it is written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from parley.consumer import read_events, reader
from parley.ids import NS
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS
from schemas.events import MemoryFact, MemoryUpdated
from streams.projection import to_time


TOPIC = "user.memory"
MAX_FACTS = 50
MAX_FACT_CHARS = 500


def fact(user_id: str, text: str) -> MemoryFact:
    return MemoryFact(fact_id=str(uuid.uuid5(NS, f"memory:{user_id}:{text}")), text=text)


@dataclass(frozen=True)
class Statement:
    cql: str  # tables as {ks}.name
    values: tuple[Any, ...]


def writes_for(event: MemoryUpdated) -> list[Statement]:
    ts = event.occurred_at
    out = [Statement("DELETE FROM {ks}.user_memory USING TIMESTAMP ? WHERE user_id = ?", (ts - 1, event.user_id))]
    for position, f in enumerate(event.facts):
        out.append(
            Statement(
                "UPDATE {ks}.user_memory USING TIMESTAMP ? SET fact_id = ?, text = ?, updated_at = ? "
                "WHERE user_id = ? AND position = ?",
                (ts, uuid.UUID(f.fact_id), f.text, to_time(ts), event.user_id, position),
            )
        )
    return out


class MemoryReader:
    """Every user's latest memory, from the compacted topic read whole (no group: a restart
    must see all of it again). Blocking: call ``poll`` from a thread."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.topic = kafka.topic(TOPIC)
        self.facts: dict[str, tuple[int, list[str]]] = {}  # user → (occurred_at, texts)
        self._consumer = reader(kafka, "memory")
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(TOPICS[TOPIC].partitions)]
        )

    def poll(self, timeout: float = 0.5) -> int:
        events, _ = read_events(self._consumer, MemoryUpdated, 500, timeout, "memory")
        for event in events:
            known = self.facts.get(event.user_id)
            if known is None or known[0] <= event.occurred_at:
                self.facts[event.user_id] = (event.occurred_at, [f.text for f in event.facts])
        return len(events)

    def of(self, user_id: str) -> list[str]:
        return list(self.facts.get(user_id, (0, []))[1])

    def close(self) -> None:
        self._consumer.close()
