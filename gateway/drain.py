"""Leaving gracefully on SIGTERM: readiness off and new streams refused at once, replies in
flight given ``PARLEY_GATEWAY_DRAIN_S`` to finish, the rest told to resume elsewhere.

``Drain`` counts the live SSE streams of this process; once the deadline passes
it calls each one's ``on_cut``, which makes the stream's source stop where it
waits (a token stream gets a stop in its queue: no task or wait per chunk to
watch for the deadline), and ``until_cut`` ends the events of a stream so
stopped with an ``error`` event ``gateway_draining`` (with ``retry_after``).
The client reconnects with ``GET /v1/messages/{id}/stream`` and the
``Last-Event-ID`` it holds; any other gateway continues from there, since the
reply lives on ``chat.tokens``, not here. ``gateway/__main__.py`` runs the
drain before uvicorn's own shutdown, which would stop listening first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway import replies
from parley.metrics import OPEN_STREAMS

log = logging.getLogger(__name__)

DRAINING = "gateway_draining"
#: After the deadline, how long cut streams get to send their last event and close.
CUT_GRACE_S = 5.0


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self._cut = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._live = 0
        self._on_cut: set[Callable[[], None]] = set()

    @property
    def live(self) -> int:
        return self._live

    @property
    def cut_now(self) -> bool:
        """The deadline passed: live streams were told to stop."""
        return self._cut.is_set()

    @contextlib.contextmanager
    def stream(self, on_cut: Callable[[], None]) -> Any:
        """Count a live stream for as long as the block runs; ``on_cut`` stops its source at the deadline."""
        self._live += 1
        OPEN_STREAMS.inc()
        self._idle.clear()
        self._on_cut.add(on_cut)
        if self._cut.is_set():
            on_cut()
        try:
            yield
        finally:
            self._on_cut.discard(on_cut)
            self._live -= 1
            OPEN_STREAMS.dec()
            if self._live == 0:
                self._idle.set()

    async def run(self, deadline_s: float) -> int:
        """Refuse new streams from now on, wait for the live ones up to ``deadline_s``, then cut the rest.

        Returns how many streams were cut.
        """
        self.draining = True
        log.info("draining", extra={"live_streams": self._live, "deadline_s": deadline_s})
        try:
            await asyncio.wait_for(self._idle.wait(), deadline_s)
            return 0
        except asyncio.TimeoutError:
            cut = self._live
            self._cut.set()
            for on_cut in list(self._on_cut):
                on_cut()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), CUT_GRACE_S)
            log.info("drain deadline passed; streams told to resume elsewhere", extra={"cut_streams": cut})
            return cut


def draining_error(cursor: str | None, retry_after: int) -> dict[str, Any]:
    message = "this gateway is shutting down; resume the stream with GET /v1/messages/{id}/stream and Last-Event-ID"
    return replies.sse("error", {"code": DRAINING, "message": message, "retry_after": retry_after}, cursor)


def is_cut(event: dict[str, Any]) -> bool:
    """Whether ``event`` is the error ``until_cut`` ends a stream with (the reply itself goes on)."""
    return event["event"] == "error" and json.loads(event["data"]).get("code") == DRAINING


async def until_cut(events: AsyncIterator[dict[str, Any]], drain: Drain, retry_after: int) -> AsyncIterator[dict[str, Any]]:
    """``events`` until they end; a source that ended without its reply's end because the drain cut it
    (its ``on_cut`` stopped it) ends with a ``gateway_draining`` error.

    The error carries the last cursor sent, so a client's ``Last-Event-ID`` is right either way.
    """
    cursor: str | None = None
    ended = False
    try:
        async for event in events:
            cursor = event.get("id", cursor)
            ended = event["event"] in ("done", "error")
            yield event
    finally:  # our reader went away: end the source now (its own cleanup closes the token stream)
        closer = getattr(events, "aclose", None)
        if closer is not None:
            await closer()
    if not ended and drain.cut_now:
        yield draining_error(cursor, retry_after)
