"""Admission with the pools' Kafka backlog as input: what waits unread counts as demand, the router's own turns
since a reading count before the next one, and a stale or missing reading falls back to the heartbeats."""

from __future__ import annotations

import uuid

import pytest

from schemas.events import GenerationCompleted, InferenceRequested, InferenceRouted, PromptMessage, TokenChunk, WorkerHeartbeat
from streams.fleet import Fleet, Offsets, unread
from streams.router import Router, policy_from
from streams.settings import RouterSettings

# One pool, one worker of 8 slots, all busy (pressure 1.0): what waits in Kafka decides.
# Free turns are shed from pressure 1.25 (demand 10), paid ones beyond 2.0 (demand 16).
SETTINGS = RouterSettings(
    pools="small=s", capabilities="small=chat", busy=0.8, queue_limit=1.25, paid_limit=2.0, backlog_stale_s=5.0
)
PARTITIONS = list(range(6))


def turn(tier: str) -> InferenceRequested:
    return InferenceRequested(
        conversation_id=str(uuid.uuid4()), user_id="u", request_id=str(uuid.uuid4()), parent_id=str(uuid.uuid4()),
        messages=[PromptMessage(role="user", content="hello")], prompt_tokens=10, max_tokens=10, tier=tier,
    )


def busy_router(now: float = 0.0) -> Router:
    router = Router(policy_from(SETTINGS))
    router.heartbeat(
        WorkerHeartbeat(worker_id="w", pool="small", partitions=PARTITIONS, read_to=[100] * 6, running=8,
                        max_running=8),
        now,
    )
    return router


def read(router: Router, at: float, waiting: int) -> None:
    """A backlog reading begun at ``at``: ``waiting`` records past where the worker took partition 0 to."""
    ends = {p: 100 + (waiting if p == 0 else 0) for p in PARTITIONS}
    router.backlog(router.backlog_mark(at), {"small": Offsets(ends=ends, starts=dict.fromkeys(PARTITIONS, 0))})


def verdict(router: Router, tier: str, now: float) -> str:
    out = router.route(turn(tier), now)
    if len(out) == 1 and isinstance(out[0], InferenceRouted):
        return "routed"
    completed, last = out
    assert isinstance(completed, GenerationCompleted) and isinstance(last, TokenChunk)
    assert (completed.finish_reason, completed.error_code, completed.pool) == ("rejected", "overloaded", "small")
    assert last.finish_reason == "rejected" and last.retry_after >= SETTINGS.retry_after_s
    return "shed"


@pytest.mark.parametrize(
    "tier, waiting, expected",
    [
        ("free", 1, "routed"),  # 9 / 8: queued, under the free bound
        ("free", 2, "shed"),  # 10 / 8 = 1.25: the free bound
        ("plus", 8, "routed"),  # 16 / 8 = 2.0: the paid bound itself still admits
        ("plus", 9, "shed"),  # past the paid share
        ("enterprise", 2, "routed"),  # where free turns are shed, paid ones are not
    ],
)
def test_the_backlog_counts_as_demand(tier: str, waiting: int, expected: str) -> None:
    router = busy_router()
    read(router, at=0.5, waiting=waiting)
    assert router.loads(1.0, ["small"])["small"].waiting == waiting
    assert verdict(router, tier, now=1.0) == expected


def test_turns_routed_since_the_reading_count_before_the_next_one() -> None:
    router = busy_router()
    read(router, at=0.5, waiting=0)
    assert verdict(router, "free", now=1.0) == "routed"  # 8 / 8
    assert verdict(router, "free", now=1.1) == "routed"  # 9 / 8: the one routed since the reading counts
    assert verdict(router, "free", now=1.2) == "shed"  # 10 / 8
    assert verdict(router, "plus", now=1.2) == "routed"
    # The next reading sees the three in the log (they were routed before it began): counted once, not twice.
    read(router, at=1.5, waiting=3)
    assert router.loads(1.6, ["small"])["small"].demand == 8 + 3


def test_a_stale_reading_is_not_used() -> None:
    router = busy_router()
    read(router, at=0.0, waiting=20)
    assert verdict(router, "free", now=5.0) == "shed"  # 5 s old: still fresh
    # Past PARLEY_ROUTER_BACKLOG_STALE_S the heartbeats alone judge: 8 / 8, queued.
    assert router.waiting("small", 5.01) is None
    assert verdict(router, "free", now=5.01) == "routed"
    read(router, at=5.5, waiting=20)  # the reader is back
    assert verdict(router, "free", now=6.0) == "shed"


def test_before_the_first_reading_the_heartbeats_judge() -> None:
    router = busy_router()
    assert router.waiting("small", 1.0) is None
    assert verdict(router, "free", now=1.0) == "routed"  # 8 / 8
    assert verdict(router, "free", now=1.0) == "routed"  # 9 / 8: this router's placement since the beat
    assert verdict(router, "free", now=1.0) == "shed"  # 10 / 8


def test_unread_counts_past_each_readers_position_or_the_groups() -> None:
    offsets = Offsets(ends={0: 50, 1: 30, 2: 7}, starts={0: 10, 1: 25, 2: 7})
    assert unread(offsets, {}) == 40 + 5  # nobody reads: from where the group would resume
    assert unread(offsets, {0: 45}) == 5 + 5  # a worker took partition 0 to 45
    assert unread(offsets, {0: 60}) == 0 + 5  # a position ahead of an older end is no negative backlog


def test_the_freshest_claim_of_a_partition_says_where_it_was_read_to() -> None:
    fleet = Fleet()
    old = WorkerHeartbeat(worker_id="a", pool="small", partitions=[0, 1], read_to=[40, -1], occurred_at=1)
    fleet.observe(old, 0.0, wall_us=2)
    assert fleet.read_to("small", 0.0) == {0: 40}  # -1: nothing taken yet from partition 1
    # b was assigned partition 0 since and has taken nothing from it: the group's offset is where it resumes
    fleet.observe(WorkerHeartbeat(worker_id="b", pool="small", partitions=[0], read_to=[-1], occurred_at=2), 0.0, 3)
    assert fleet.read_to("small", 0.0) == {}
    # a worker that does not report read_to (an older one) leaves its partitions to the group's offsets
    fleet.observe(WorkerHeartbeat(worker_id="c", pool="small", partitions=[2], occurred_at=3), 0.0, 4)
    assert fleet.read_to("small", 0.0) == {}


def test_each_reading_sets_the_pools_backlog_gauge() -> None:
    from parley.metrics import POOL_BACKLOG

    router = busy_router()
    read(router, 0.5, 7)
    assert POOL_BACKLOG.labels("small")._value.get() == 7
    read(router, 1.5, 0)
    assert POOL_BACKLOG.labels("small")._value.get() == 0
