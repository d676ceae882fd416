"""User memory: the projection of ``MemoryUpdated`` snapshots (its reader is streams/readers.py).

Each MemoryUpdated carries the user's whole memory, so its projection replaces
the user's rows: a partition delete one microsecond before the event, then the
facts at the event's timestamp. Replayed in any order the newest snapshot wins:
a newer delete shadows every older fact whenever it is written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from parley.ids import NS
from schemas import sealing
from schemas.events import MemoryFact, MemoryUpdated
from streams.projection import to_time


TOPIC = "user.memory"
MAX_FACTS = 50
MAX_FACT_CHARS = 500


def fact(user_id: str, text: str, sealer: sealing.Sealer) -> MemoryFact:
    """A fact and its id, derived from its text through the owner's key (``Sealer.blind``): the same
    fact keeps its id, and once the key is destroyed no one can confirm a guess of the text from it.
    (Synchronous: code on an event loop awaits ``sealing.prefetch([user_id], create=True)`` first.)"""
    return MemoryFact(fact_id=str(uuid.uuid5(NS, f"memory:{user_id}:" + sealer.blind(user_id, f"fact:{text}"))), text=text)


@dataclass(frozen=True)
class Statement:
    cql: str  # tables as {ks}.name
    values: tuple[Any, ...]


def writes_for(event: MemoryUpdated, sealer: sealing.Sealer) -> list[Statement]:
    ts = event.occurred_at
    out = [Statement("DELETE FROM {ks}.user_memory USING TIMESTAMP ? WHERE user_id = ?", (ts - 1, event.user_id))]
    for position, f in enumerate(event.facts):
        fact_id = uuid.UUID(f.fact_id)
        text = sealer.seal(event.user_id, f.text, at=sealing.cell_at("user_memory", "text", fact_id), deterministic=True)
        out.append(
            Statement(
                "UPDATE {ks}.user_memory USING TIMESTAMP ? SET fact_id = ?, text = ?, updated_at = ? "
                "WHERE user_id = ? AND position = ?",
                (ts, fact_id, text, to_time(ts), event.user_id, position),
            )
        )
    return out
