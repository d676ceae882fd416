"""Events of one key in order, of different keys at once: the processors' concurrency.

A faust agent handles one event at a time, across every partition it owns:
while one event waits (a Cassandra read, the acknowledgement of what it
produced, a parent row the context builder waits for), every other
conversation's event queues behind it. With ten turns arriving together that
added ~100 ms to the last one's first token (bench/load.py's hop breakdown).

``Lanes`` keeps the order that matters, per key (a conversation's events are
keyed by its id on every topic), and nothing more: an event goes to lane
``crc32(key) % width``; each lane is a bounded queue and one task that
handles its events in arrival order. Offsets are acknowledged by the caller's
``handle`` when each event is done, out of order across lanes; faust commits
only up to the first offset not yet acknowledged, so a crash still redelivers
everything unfinished (at-least-once, as before).

Every processor's state is per conversation (or per user, on the topics keyed
by user), so this order is the only one they rely on; a processor whose state
spans keys would need ``PARLEY_STREAMS_LANES=1``.

A full lane blocks ``put``: the reader stops pulling records, and faust's
buffer pauses the partitions (backpressure, not unbounded memory). A handler
that raises fails its lane, and the next ``put`` raises it. The runner's
handler retries or dead-letters every error itself (streams/handling.py), and
exits the process if one escapes anyway (streams/app.py).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lanes(Generic[T]):
    def __init__(self, width: int, depth: int, handle: Callable[[T], Awaitable[None]], name: str = "lane") -> None:
        if width < 1 or depth < 1:
            raise ValueError("a lane set needs a width and a depth of at least 1")
        self._handle = handle
        self._queues: list[asyncio.Queue[T]] = [asyncio.Queue(depth) for _ in range(width)]
        self._tasks = [asyncio.create_task(self._run(q), name=f"{name}-{i}") for i, q in enumerate(self._queues)]
        self._failed: BaseException | None = None

    def lane_of(self, key: bytes | None) -> int:
        return zlib.crc32(key or b"") % len(self._queues)

    async def put(self, key: bytes | None, item: T) -> None:
        """Queue ``item`` behind the earlier items of its key's lane (waits while that lane is full)."""
        self._raise_failure()
        queue = self._queues[self.lane_of(key)]
        while True:
            try:
                # Waited for in steps, so a lane that failed meanwhile is noticed, not waited on forever.
                async with asyncio.timeout(0.05):
                    await queue.put(item)
                return
            except TimeoutError:
                self._raise_failure()

    async def close(self) -> None:
        """Stop every lane now; items still queued are left unhandled (their offsets stay uncommitted)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _raise_failure(self) -> None:
        if self._failed is not None:
            raise self._failed

    async def _run(self, queue: asyncio.Queue[T]) -> None:
        while True:
            item = await queue.get()
            try:
                await self._handle(item)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self._failed = exc
                raise
