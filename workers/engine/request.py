"""One request's life inside the engine, and what a backend offers the HTTP layer.

A backend publishes ``Progress`` (what a step added) into the request's
``RequestState``; the HTTP handler waits on it and takes everything published
since it last looked, merged into one (as SGLang's TokenizerManager does), so a
slow client gets fewer, larger steps instead of a queue of events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from workers.engine.protocol import GenerateInput, Progress


class RequestState:
    def __init__(self, request: GenerateInput, prompt_tokens: int, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.prompt_tokens = prompt_tokens
        self.created = time.monotonic()
        self._loop = loop
        # What was published and not yet taken: the deltas, and the newest counts and ending.
        self._texts: list[str] = []
        self._ids: list[int] = []
        self._latest: Progress | None = None
        self._event = asyncio.Event()
        self.finished = False

    @property
    def rid(self) -> str:
        return self.request.rid

    def publish(self, progress: Progress) -> None:
        """Called on the event loop's thread."""
        if self.finished:
            return
        if progress.text:
            self._texts.append(progress.text)
        self._ids.extend(progress.output_ids)
        self._latest = progress
        self.finished = progress.finish_reason is not None
        self._event.set()

    def publish_threadsafe(self, progress: Progress) -> None:
        """Called from a backend's own thread (the torch batcher)."""
        self._loop.call_soon_threadsafe(self.publish, progress)

    async def progress(self) -> AsyncIterator[Progress]:
        """What was published since the last time, merged into one, until the one carrying finish_reason."""
        while True:
            await self._event.wait()
            self._event.clear()
            latest = self._latest
            if latest is None:
                continue
            taken = replace(latest, text="".join(self._texts), output_ids=tuple(self._ids))
            self._texts.clear()
            self._ids.clear()
            self._latest = None
            yield taken
            if taken.finish_reason is not None:
                return


def publish_threadsafe(steps: list[tuple[RequestState, Progress]]) -> None:
    """One engine step's progress of every request, handed to their loop in one wake-up (one
    ``call_soon_threadsafe`` per step, not per request: each is a self-pipe write)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[RequestState, Progress]]] = {}
    for state, progress in steps:
        by_loop.setdefault(state._loop, []).append((state, progress))
    for loop, batch in by_loop.items():
        loop.call_soon_threadsafe(_publish_all, batch)


def _publish_all(batch: list[tuple[RequestState, Progress]]) -> None:
    for state, progress in batch:
        state.publish(progress)


@dataclass(frozen=True)
class LoadSnapshot:
    """What /get_load, /v1/loads and /get_server_info report."""

    running: int
    waiting: int
    max_running: int
    used_tokens: int
    max_total_tokens: int
    cache_hit_rate: float
    gen_throughput: float  # tokens/s over the last few seconds
    internal: dict[str, Any] = field(default_factory=dict)  # backend counters (batching proof, steps)


class Backend(Protocol):
    """The engine behind the HTTP API: torch (batcher.py) or synthetic (synthetic.py)."""

    model_path: str
    untrained: bool
    context_length: int
    #: The sampling params (of protocol.IMPLEMENTED) this backend applies; the rest of IMPLEMENTED it
    #: accepts without effect, and says so in /get_server_info.
    sampling_applied: frozenset[str]

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def ready(self) -> bool: ...

    def submit(self, request: GenerateInput) -> RequestState:
        """Tokenize, validate and queue; raises protocol.InvalidRequest as SGLang would answer 400."""
        ...

    def abort(self, rid: str) -> None: ...

    def abort_all(self) -> None: ...

    def load(self) -> LoadSnapshot: ...


class Throughput:
    """Generated tokens per second over a sliding window, for gen_throughput."""

    def __init__(self, window_s: float = 5.0) -> None:
        self._window = window_s
        self._marks: deque[tuple[float, int]] = deque()

    def add(self, tokens: int) -> None:
        now = time.monotonic()
        self._marks.append((now, tokens))
        cutoff = now - self._window
        while self._marks and self._marks[0][0] < cutoff:
            self._marks.popleft()

    def rate(self) -> float:
        now = time.monotonic()
        recent = [n for t, n in self._marks if t >= now - self._window]
        return sum(recent) / self._window
