"""Cache-aware placement of conversations on a pool's workers (pure; the router applies it).

A conversation's turns share a growing prefix, so the worker that served its
last turn holds it in its prefix cache: send the next turn there (its *home*).
When that worker is hot, move the conversation to the least-loaded worker and
remember the move, so its later turns build a cache there instead of bouncing.

"Hot" uses the two thresholds of SGLang's cache-aware router: the imbalance is
real only when the home's load exceeds the least-loaded worker's by more than
``balance_abs`` requests *and* by more than a factor ``balance_rel``. Loads
come from worker heartbeats (running + queued), plus what this router placed
since each heartbeat, because heartbeats lag by seconds.

A worker is addressed through the partitions of ``chat.inference.<pool>`` it
owns (the consumer group assigns them); a conversation's home is a partition,
so a rebalance that hands the partition to another worker just moves the
cache once, like a restart would.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from parley.partitioning import murmur2


@dataclass(frozen=True)
class PlacementConfig:
    balance_abs: float = 4.0  # requests
    balance_rel: float = 1.5  # ratio
    max_conversations: int = 200_000  # homes remembered (LRU)


@dataclass(frozen=True)
class Replica:
    """A worker as its last heartbeat described it."""

    id: str
    partitions: tuple[int, ...]
    load: float  # running + queued
    capacity: float = 0.0  # max_running: admission's denominator


@dataclass(frozen=True)
class Decision:
    partition: int
    replica: str
    reason: str  # sticky | new | moved_hot | moved_gone


class Placement:
    def __init__(self, config: PlacementConfig | None = None) -> None:
        self.config = config or PlacementConfig()
        self._homes: OrderedDict[str, int] = OrderedDict()  # conversation → partition
        self._placed: dict[str, float] = {}  # replica → requests placed since its heartbeat

    def heartbeat(self, replica_id: str) -> None:
        """A fresh heartbeat supersedes the router's own estimate for that worker."""
        self._placed.pop(replica_id, None)

    def load(self, replica: Replica) -> float:
        return replica.load + self._placed.get(replica.id, 0.0)

    def place(self, conversation_id: str, replicas: Sequence[Replica]) -> Decision | None:
        """Where this turn goes; None when no worker owns a partition (fall back to hashing)."""
        live = [r for r in replicas if r.partitions]
        if not live:
            return None
        owner = {p: r for r in live for p in r.partitions}
        home = self._homes.get(conversation_id)
        coolest = min(live, key=lambda r: (self.load(r), _tiebreak(conversation_id, r.id)))
        if home is not None and home in owner:
            current = owner[home]
            if not self._hot(current, coolest):
                return self._commit(conversation_id, home, current, "sticky")
            reason = "moved_hot"
        else:
            reason = "moved_gone" if home is not None else "new"
        partition = coolest.partitions[murmur2(conversation_id.encode()) % len(coolest.partitions)]
        return self._commit(conversation_id, partition, coolest, reason)

    def _hot(self, home: Replica, coolest: Replica) -> bool:
        h, c = self.load(home), self.load(coolest)
        return h - c > self.config.balance_abs and h > c * self.config.balance_rel

    def _commit(self, conversation_id: str, partition: int, replica: Replica, reason: str) -> Decision:
        self._homes[conversation_id] = partition
        self._homes.move_to_end(conversation_id)
        while len(self._homes) > self.config.max_conversations:
            self._homes.popitem(last=False)
        self._placed[replica.id] = self._placed.get(replica.id, 0.0) + 1.0
        return Decision(partition, replica.id, reason)


def _tiebreak(conversation_id: str, replica_id: str) -> int:
    """Spread ties between equally loaded workers by conversation, deterministically."""
    return murmur2(f"{conversation_id}/{replica_id}".encode())
