"""One request's life inside the engine, and what a backend offers the HTTP layer.

A backend publishes ``Progress`` into the request's ``RequestState``; the HTTP
handler waits on it and always sends the newest state (as SGLang's
TokenizerManager does), so a slow client gets fewer, larger steps instead of
an unbounded queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from workers.engine.protocol import GenerateInput, Progress


class RequestState:
    def __init__(self, request: GenerateInput, prompt_tokens: int, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.prompt_tokens = prompt_tokens
        self.created = time.monotonic()
        self._loop = loop
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
        self._latest = progress
        self.finished = progress.finish_reason is not None
        self._event.set()

    def publish_threadsafe(self, progress: Progress) -> None:
        """Called from a backend's own thread (the torch batcher)."""
        self._loop.call_soon_threadsafe(self.publish, progress)

    async def progress(self) -> AsyncIterator[Progress]:
        """Newest progress each time something changed, until the one carrying finish_reason."""
        while True:
            await self._event.wait()
            self._event.clear()
            latest = self._latest
            if latest is None:
                continue
            yield latest
            if latest.finish_reason is not None:
                return


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
