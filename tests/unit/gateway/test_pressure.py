"""The gateway refuses what the router would shed, from the same heartbeats and thresholds."""

from __future__ import annotations

import time

from gateway.pressure import PoolPressure
from parley.settings import KafkaSettings
from schemas.events import WorkerHeartbeat
from streams.admission import AdmissionConfig

CFG = AdmissionConfig(busy=0.8, queue_limit=1.25, paid_limit=2.0, retry_after_s=10)


def pressure_with(running: int, queued: int, max_running: int = 4) -> PoolPressure:
    p = PoolPressure(KafkaSettings(), CFG, ["small", "medium"], expiry_s=6.0)  # not started: no Kafka here
    beat = WorkerHeartbeat(worker_id="w1", pool="small", partitions=[0, 1], running=running, queued=queued, max_running=max_running)
    p._fleet.observe(beat, time.monotonic())
    return p


def test_nothing_known_nothing_refused() -> None:
    assert PoolPressure(KafkaSettings(), CFG, ["small"], 6.0).shed("free") is None


def test_an_overloaded_cheapest_pool_refuses_free_turns_but_not_paid_ones() -> None:
    p = pressure_with(running=4, queued=2)  # pressure 1.5 > queue_limit
    shed = p.shed("free")
    assert shed is not None and shed.retry_after_s >= 10
    assert p.shed("enterprise") is None  # the reserved share


def test_a_busy_pool_still_queues_free_turns() -> None:
    assert pressure_with(running=4, queued=0).shed("free") is None  # pressure 1.0: queued, not shed
