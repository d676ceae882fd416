"""Batch slots handed out highest priority first: the synthetic backend's admission (the torch
backend orders its waiting queue the same way, batcher.py ``_enqueue``)."""

from __future__ import annotations

import asyncio
import heapq
import itertools


class PrioritySlots:
    """A semaphore whose waiters get a freed slot by priority (higher first), then in arrival order."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, priority: int = 0) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (-priority, next(self._arrivals), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot in the same moment it was cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():  # a cancelled waiter's future is done: skipped
                fut.set_result(None)
                return
        self._free += 1
