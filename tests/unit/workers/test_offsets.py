"""The watermark tracker: commit up to just below the lowest unfinished record, per partition."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.offsets import OffsetTracker


def test_nothing_started_means_nothing_to_commit() -> None:
    t = OffsetTracker()
    assert t.position(0) is None and t.committable(0) is None and t.unfinished(0) == 0


def test_in_order_finishes_move_the_watermark_each_time() -> None:
    t = OffsetTracker()
    for o in (0, 1, 2):
        t.start(0, o)
    assert t.position(0) == 0 and t.committable(0) is None
    assert t.finish(0, 0) == 1
    assert t.committable(0) == 0
    assert t.finish(0, 1) == 2
    assert t.finish(0, 2) == 3
    assert t.committable(0) == 2 and t.unfinished(0) == 0


def test_a_later_finish_waits_for_the_earlier_one() -> None:
    t = OffsetTracker()
    for o in (10, 11, 12):
        t.start(3, o)
    assert t.finish(3, 12) is None
    assert t.finish(3, 11) is None
    assert t.position(3) == 10 and t.committable(3) == 9
    assert t.unfinished(3) == 1
    assert t.finish(3, 10) == 13  # all three at once


def test_gaps_between_offsets_do_not_block_the_watermark() -> None:
    """Offsets skip (transaction markers, compaction, records of other types handled elsewhere)."""
    t = OffsetTracker()
    for o in (5, 9, 20):
        t.start(0, o)
    assert t.finish(0, 5) == 9  # resume at the next unfinished record, not at 6
    assert t.finish(0, 20) is None
    assert t.finish(0, 9) == 21


def test_new_records_after_everything_finished_hold_the_watermark_again() -> None:
    t = OffsetTracker()
    t.start(0, 0)
    t.finish(0, 0)
    t.start(0, 1)
    assert t.position(0) == 1
    t.start(0, 2)
    assert t.finish(0, 2) is None and t.position(0) == 1


def test_partitions_are_independent() -> None:
    t = OffsetTracker()
    t.start(0, 0)
    t.start(1, 0)
    t.start(1, 1)
    assert t.finish(1, 0) == 1
    assert t.position(0) == 0 and t.position(1) == 1
    assert t.partitions() == [0, 1]


def test_offsets_must_increase_within_a_partition() -> None:
    t = OffsetTracker()
    t.start(0, 4)
    with pytest.raises(ValueError):
        t.start(0, 4)
    with pytest.raises(ValueError):
        t.start(0, 3)
    t.start(1, 0)  # another partition has its own sequence


def test_finishing_an_unknown_or_finished_record_is_an_error() -> None:
    t = OffsetTracker()
    with pytest.raises(ValueError):
        t.finish(0, 0)
    t.start(0, 0)
    t.start(0, 1)
    with pytest.raises(ValueError):
        t.finish(0, 7)
    t.finish(0, 1)
    with pytest.raises(ValueError):
        t.finish(0, 1)  # finished but still above the watermark
    t.finish(0, 0)
    with pytest.raises(ValueError):
        t.finish(0, 0)  # finished and below the watermark


def test_drop_forgets_a_revoked_partition() -> None:
    t = OffsetTracker()
    t.start(2, 7)
    t.drop(2)
    assert t.position(2) is None and t.partitions() == []
    t.start(2, 3)  # a new assignment may start lower (the committed offset)
    assert t.position(2) == 3


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    gaps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=40))
    offsets = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    return offsets, draw(st.permutations(offsets))


@given(runs())
def test_the_watermark_never_passes_an_unfinished_record(run: tuple[list[int], list[int]]) -> None:
    offsets, finish_order = run
    t = OffsetTracker()
    for o in offsets:
        t.start(0, o)
    unfinished = set(offsets)
    last = t.position(0)
    for o in finish_order:
        moved = t.finish(0, o)
        unfinished.discard(o)
        pos = t.position(0)
        expected = min(unfinished) if unfinished else max(offsets) + 1
        assert pos == expected
        assert moved == (pos if pos != last else None)
        assert last is not None and pos is not None and pos >= last  # never moves back
        last = pos
    assert t.unfinished(0) == 0
