"""The fleet as the router sees it: ``fleet.heartbeats`` folded into live workers per pool.

Every worker publishes a WorkerHeartbeat every few seconds (partitions of
``chat.inference.<pool>`` it owns and how far it took each, running, queued,
max_running, draining). ``Fleet`` keeps the newest beat of each worker and
answers three questions for a pool: which replicas can take new work (for
``placement``), how loaded the pool is (for ``admission``), and where its
partitions were read to (for ``route_backlog``). It is pure: the caller passes
the clock.

A worker not heard from for ``expiry_s`` is gone (killed, partitioned away);
a draining one takes nothing new; one that left says so with a last beat that
owns no partitions. During a consumer-group rebalance two workers may claim a
partition for a moment; the fresher beat wins, so a partition that moved is
just a cache move for the conversations homed on it.

``streams/readers.py HeartbeatReader`` is the I/O edge: it reads the
compacted topic whole (no consumer group: every router instance needs every
beat); ``observe`` skips beats too old to matter, so a restarted router starts
from what is live.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from schemas.events import WorkerHeartbeat
from streams.admission import Load
from streams.placement import Replica


TOPIC = "fleet.heartbeats"


@dataclass(frozen=True)
class Seen:
    beat: WorkerHeartbeat
    at: float  # the caller's clock (monotonic seconds) when it arrived


class Fleet:
    def __init__(self, expiry_s: float = 6.0) -> None:
        self.expiry_s = expiry_s
        self._workers: dict[str, Seen] = {}

    def observe(self, beat: WorkerHeartbeat, now: float, wall_us: int | None = None) -> bool:
        """Take a beat; False when it is older than ``expiry_s`` by the producer's clock (a replayed one)."""
        wall_us = int(time.time() * 1e6) if wall_us is None else wall_us
        age = (wall_us - beat.occurred_at) / 1e6
        if age > self.expiry_s:
            return False
        known = self._workers.get(beat.worker_id)
        if known is not None and known.beat.occurred_at > beat.occurred_at:
            return False
        # Liveness runs on the caller's clock from arrival: producers' clocks only filter replayed beats.
        self._workers[beat.worker_id] = Seen(beat, now)
        return True

    def model_of(self, worker_id: str) -> str:
        """The model ``worker_id``'s engine said it serves in its last beat ("" when unknown)."""
        seen = self._workers.get(worker_id)
        return seen.beat.model if seen is not None else ""

    def models(self, now: float) -> dict[str, set[str]]:
        """Pool → the models its live workers' engines serve."""
        out: dict[str, set[str]] = {}
        for beat in self.live(now):
            if beat.model:
                out.setdefault(beat.pool, set()).add(beat.model)
        return out

    def live(self, now: float) -> list[WorkerHeartbeat]:
        """Beats of workers heard from within ``expiry_s``; the expired are forgotten."""
        for worker_id in [w for w, s in self._workers.items() if now - s.at > self.expiry_s]:
            del self._workers[worker_id]
        return [s.beat for s in self._workers.values()]

    def replicas(self, pool: str, now: float) -> list[Replica]:
        """Workers of ``pool`` that take new work, each with the partitions it alone owns now."""
        beats = [b for b in self.live(now) if b.pool == pool and not b.draining]
        owner: dict[int, WorkerHeartbeat] = {}
        for beat in sorted(beats, key=lambda b: b.occurred_at):  # fresher claims overwrite older ones
            for partition in beat.partitions:
                owner[partition] = beat
        return [
            Replica(
                id=b.worker_id,
                partitions=tuple(sorted(p for p, o in owner.items() if o is b)),
                load=float(b.running + b.queued),
                capacity=float(b.max_running),
            )
            for b in beats
        ]

    def read_to(self, pool: str, now: float) -> dict[int, int]:
        """Partition of ``pool`` → the next offset its owner will take, as the freshest beat claiming it says."""
        out: dict[int, int] = {}
        beats = [b for b in self.live(now) if b.pool == pool]
        for beat in sorted(beats, key=lambda b: b.occurred_at):  # fresher claims overwrite older ones
            for partition in beat.partitions:
                out.pop(partition, None)  # a new owner that has taken nothing yet resumes from the group's offset
            if len(beat.read_to) == len(beat.partitions):
                out.update({p: at for p, at in zip(beat.partitions, beat.read_to, strict=True) if at >= 0})
        return out

    def pools(self, now: float) -> set[str]:
        return {b.pool for b in self.live(now)}


def pool_load(replicas: Iterable[Replica], load_of: dict[str, float] | None = None, waiting: float = 0.0) -> Load | None:
    """Demand over capacity of the replicas taking work; None when there are none (nothing to judge by).

    ``load_of`` overrides a replica's reported load (the router adds what it placed since the beat);
    ``waiting`` is what waits for the pool beyond its workers (its Kafka backlog, ``streams.route_backlog``).
    """
    taking = [r for r in replicas if r.partitions and r.capacity > 0]
    if not taking:
        return None
    demand = sum((load_of or {}).get(r.id, r.load) for r in taking) + waiting
    return Load(demand=demand, capacity=sum(r.capacity for r in taking), waiting=waiting)


# ------------------------------------------------------------------ the backlog (streams/route_backlog.py)


@dataclass(frozen=True)
class Offsets:
    ends: Mapping[int, int]  # partition → end offset (the next record's)
    starts: Mapping[int, int]  # partition → where the group resumes it: committed, else the log's start


@dataclass(frozen=True)
class Reading:
    at: float  # monotonic, when the reading began
    routed: int  # turns this router had routed to the pool by then
    offsets: Offsets


def unread(offsets: Offsets, read_to: Mapping[int, int]) -> int:
    """Records past where each partition's reader has taken to (``read_to``, else the group's start)."""
    return sum(max(0, end - read_to.get(p, offsets.starts.get(p, end))) for p, end in offsets.ends.items())


def fresh(reading: Reading | None, now: float, stale_s: float) -> bool:
    return reading is not None and now - reading.at <= stale_s
