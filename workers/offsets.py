"""Which offset of each partition is safe to commit, given requests that finish out of order.

A worker runs many requests of one partition at once and they finish in any
order. Committing the offset of a finished request while an earlier one still
runs would lose the earlier one if the worker died: the group would resume
after it. So the commit position of a partition is its lowest unfinished
offset (or one past the highest started offset when nothing is unfinished);
everything below it is done. Pure: no Kafka here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class _Partition:
    order: deque[int] = field(default_factory=deque)  # started, not yet below the watermark, ascending
    finished: set[int] = field(default_factory=set)  # finished but above an unfinished one
    highest: int = -1  # highest offset started


class OffsetTracker:
    """Per-partition watermark of records started and finished."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}

    def start(self, partition: int, offset: int) -> None:
        """A record was taken. Offsets of one partition must arrive in increasing order, as Kafka delivers them."""
        part = self._parts.setdefault(partition, _Partition())
        if offset <= part.highest:
            raise ValueError(f"offset {offset} of partition {partition} started after {part.highest}")
        part.order.append(offset)
        part.highest = offset

    def finish(self, partition: int, offset: int) -> int | None:
        """A record is done; returns the new commit position if it moved, else None."""
        part = self._parts.get(partition)
        if part is None or offset in part.finished or offset not in part.order:
            raise ValueError(f"offset {offset} of partition {partition} was not started or already finished")
        part.finished.add(offset)
        moved = False
        while part.order and part.order[0] in part.finished:
            part.finished.discard(part.order.popleft())
            moved = True
        return self._position(part) if moved else None

    def position(self, partition: int) -> int | None:
        """Offset the group should resume this partition at; None when nothing was started."""
        part = self._parts.get(partition)
        return None if part is None else self._position(part)

    def committable(self, partition: int) -> int | None:
        """Highest offset that may be marked done: just below the lowest unfinished one."""
        pos = self.position(partition)
        return None if pos is None or pos == 0 else pos - 1

    def unfinished(self, partition: int) -> int:
        part = self._parts.get(partition)
        return 0 if part is None else len(part.order) - len(part.finished)

    def partitions(self) -> list[int]:
        return sorted(self._parts)

    def drop(self, partition: int) -> None:
        """Forget a partition (revoked): its unfinished records are the next owner's."""
        self._parts.pop(partition, None)

    @staticmethod
    def _position(part: _Partition) -> int | None:
        if part.highest < 0:
            return None
        return part.order[0] if part.order else part.highest + 1
