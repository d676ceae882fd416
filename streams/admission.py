"""Admission control by tier (pure): admit, downgrade, queue, or shed — decided from pool pressure.

Pressure of a pool = its demand over its capacity (the sum of its workers'
concurrency limits). Demand is every turn the pool owes: what its workers hold
(running + queued, from their heartbeats) plus what waits for them in Kafka
(its backlog: the records of ``chat.inference.<pool>`` no worker has taken, read
every second, plus the turns this router routed there since that reading;
``streams.route_backlog``). With no fresh backlog reading, it is the heartbeats
plus what this router placed since each. So pressure − 1 is the queue a new turn
joins, in units of the pool's capacity: about how many of a turn's durations
it waits for a slot. Under pressure the free tier goes first: it is
downgraded to a smaller pool that has room (recorded on the event), then
admitted to a bounded queue while the pool is below ``queue_limit``, then shed
with a ``retry_after``. Paid tiers keep a reserved share: they are shed only
past ``paid_limit``: a free turn waits at most ``queue_limit − 1`` turn
durations, a paid one at most ``paid_limit − 1``. The gateway applies the same
function to the heartbeats alone (no backlog) so it can refuse before
appending (503 + Retry-After); the router decides for real.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streams.classify import RANKS

PAID = frozenset({"plus", "enterprise"})


@dataclass(frozen=True)
class Load:
    demand: float  # running + queued, plus what waits in Kafka
    capacity: float  # sum of max_running
    waiting: float = 0.0  # of the demand, what waits in Kafka (0: unknown, or none)

    @property
    def pressure(self) -> float:
        return self.demand / self.capacity if self.capacity > 0 else float("inf")


@dataclass(frozen=True)
class AdmissionConfig:
    busy: float = 0.8  # free turns look for a smaller pool above this
    queue_limit: float = 1.25  # free turns wait in the queue up to this; shed beyond
    paid_limit: float = 2.0  # paid turns are shed only beyond this (their reserved share)
    retry_after_s: float = 10.0


@dataclass(frozen=True)
class Admit:
    pool: str
    downgraded_from: str | None = None
    queued: bool = False


@dataclass(frozen=True)
class Shed:
    pool: str
    retry_after_s: float
    reason: str


def admit(tier: str, pool: str, loads: Mapping[str, Load], config: AdmissionConfig = AdmissionConfig()) -> Admit | Shed:
    """The decision for one turn of ``tier`` that the classifier sent to ``pool``."""
    load = loads.get(pool)
    if load is None:  # no heartbeat from that pool yet: nothing to judge by, let it through
        return Admit(pool)
    if tier in PAID:
        if load.pressure > config.paid_limit:
            return Shed(pool, config.retry_after_s, "paid_share_exhausted")
        return Admit(pool, queued=load.pressure >= 1.0)
    if load.pressure < config.busy:
        return Admit(pool)
    for smaller in reversed(RANKS[: RANKS.index(pool)]):  # the next smaller pool first
        other = loads.get(smaller)
        if other is not None and other.pressure < config.busy:
            return Admit(smaller, downgraded_from=pool)
    if load.pressure < config.queue_limit:
        return Admit(pool, queued=True)
    return Shed(pool, _retry_after(load, config), "overloaded")


def _retry_after(load: Load, config: AdmissionConfig) -> float:
    """Longer when the pool is further over its limit, within [retry_after_s, 6 × retry_after_s]."""
    over = max(0.0, load.pressure - config.queue_limit)
    return round(min(config.retry_after_s * (1 + 2 * over), 6 * config.retry_after_s), 1)
