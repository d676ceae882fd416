"""The cancel memory: a cancel that overtakes its request is honoured for a while, then forgotten."""

from __future__ import annotations

from workers.cancels import CancelMemory


def test_a_remembered_cancel_is_found_until_it_expires() -> None:
    m = CancelMemory(ttl_s=10)
    m.remember("r1", "user", now=100.0)
    assert m.reason("r1", now=105.0) == "user"
    assert m.reason("r2", now=105.0) is None
    assert m.reason("r1", now=110.0) is None
    assert len(m) == 0


def test_remembering_again_extends_it() -> None:
    m = CancelMemory(ttl_s=10)
    m.remember("r1", "user", now=0.0)
    m.remember("r2", "shed", now=5.0)
    m.remember("r1", "moderation", now=8.0)
    assert m.reason("r2", now=16.0) is None
    assert m.reason("r1", now=16.0) == "moderation"


def test_memory_is_bounded_by_dropping_the_oldest() -> None:
    m = CancelMemory(ttl_s=60, max_entries=3)
    for i in range(5):
        m.remember(f"r{i}", "user", now=float(i))
    assert len(m) == 3
    assert m.reason("r0", now=5.0) is None and m.reason("r1", now=5.0) is None
    assert m.reason("r4", now=5.0) == "user"
