"""The fleet view: heartbeats → live replicas per pool (expiry, draining, rebalance) and pool load."""

from __future__ import annotations

import time

from schemas.events import WorkerHeartbeat
from streams.admission import Load
from streams.fleet import Fleet, pool_load
from streams.placement import Replica

NOW_US = int(time.time() * 1e6)


def beat(worker: str, partitions: list[int], *, pool: str = "small", running: int = 0, queued: int = 0,
         max_running: int = 4, draining: bool = False, age_s: float = 0.0) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker,
        pool=pool,
        partitions=partitions,
        running=running,
        queued=queued,
        max_running=max_running,
        draining=draining,
        occurred_at=NOW_US - int(age_s * 1e6),
    )


def ids(fleet: Fleet, now: float, pool: str = "small") -> dict[str, tuple[int, ...]]:
    return {r.id: r.partitions for r in fleet.replicas(pool, now)}


def test_replicas_carry_partitions_load_and_capacity_per_pool() -> None:
    fleet = Fleet(expiry_s=6)
    fleet.observe(beat("a", [0, 1], running=2, queued=1), now=100, wall_us=NOW_US)
    fleet.observe(beat("m", [0], pool="medium"), now=100, wall_us=NOW_US)
    (a,) = fleet.replicas("small", 100)
    assert a == Replica("a", (0, 1), 3.0, 4.0)
    assert ids(fleet, 100, "medium") == {"m": (0,)}
    assert fleet.pools(100) == {"small", "medium"}


def test_a_worker_not_heard_from_expires() -> None:
    fleet = Fleet(expiry_s=6)
    fleet.observe(beat("a", [0]), now=100, wall_us=NOW_US)
    fleet.observe(beat("b", [1]), now=103, wall_us=NOW_US)
    assert ids(fleet, 105.9) == {"a": (0,), "b": (1,)}
    assert ids(fleet, 106.5) == {"b": (1,)}  # a: silent for more than 6 s
    assert ids(fleet, 110) == {}


def test_a_replayed_old_beat_is_ignored_and_an_older_one_never_overwrites_a_newer() -> None:
    fleet = Fleet(expiry_s=6)
    assert not fleet.observe(beat("gone", [0], age_s=60), now=100, wall_us=NOW_US)
    assert fleet.observe(beat("a", [0, 1], age_s=0), now=100, wall_us=NOW_US)
    assert not fleet.observe(beat("a", [0], age_s=1), now=100, wall_us=NOW_US)
    assert ids(fleet, 100) == {"a": (0, 1)}


def test_a_draining_worker_takes_nothing_new_and_a_leaving_one_owns_nothing() -> None:
    fleet = Fleet(expiry_s=6)
    fleet.observe(beat("a", [0], draining=True), now=100, wall_us=NOW_US)
    fleet.observe(beat("b", [], running=0), now=100, wall_us=NOW_US)  # its last beat after leaving the group
    fleet.observe(beat("c", [1]), now=100, wall_us=NOW_US)
    assert ids(fleet, 100) == {"b": (), "c": (1,)}
    assert pool_load(fleet.replicas("small", 100)) == Load(0.0, 4.0)  # only c takes work


def test_during_a_rebalance_the_fresher_claim_owns_the_partition() -> None:
    fleet = Fleet(expiry_s=6)
    fleet.observe(beat("old", [0, 1, 2], age_s=1.5), now=100, wall_us=NOW_US)
    fleet.observe(beat("new", [2, 3], age_s=0.0), now=100, wall_us=NOW_US)  # partition 2 moved to a scaled-up worker
    assert ids(fleet, 100) == {"old": (0, 1), "new": (2, 3)}


def test_pool_load_sums_the_replicas_taking_work_with_overrides() -> None:
    replicas = [Replica("a", (0,), 3, 4), Replica("b", (1,), 1, 4), Replica("idle", (), 9, 4)]
    assert pool_load(replicas) == Load(4.0, 8.0)
    assert pool_load(replicas, {"a": 5.0}) == Load(6.0, 8.0)
    assert pool_load([]) is None
