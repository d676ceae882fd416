"""Leaving gracefully on SIGTERM: readiness off and new streams refused at once, replies in
flight given ``PARLEY_GATEWAY_DRAIN_S`` to finish, the rest told to resume elsewhere.

``Drain`` counts the live SSE streams of this process; ``until_cut`` wraps one
stream's events so that, once the deadline passes, it ends with an ``error``
event ``gateway_draining`` (with ``retry_after``) instead of the next chunk.
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
from collections.abc import AsyncIterator
from typing import Any

from gateway import replies

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

    @property
    def live(self) -> int:
        return self._live

    @contextlib.contextmanager
    def stream(self) -> Any:
        """Count a live stream for as long as the block runs."""
        self._live += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._live -= 1
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
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), CUT_GRACE_S)
            log.info("drain deadline passed; streams told to resume elsewhere", extra={"cut_streams": cut})
            return cut

    async def cut(self) -> None:
        await self._cut.wait()


def draining_error(cursor: str | None, retry_after: int) -> dict[str, Any]:
    message = "this gateway is shutting down; resume the stream with GET /v1/messages/{id}/stream and Last-Event-ID"
    return replies.sse("error", {"code": DRAINING, "message": message, "retry_after": retry_after}, cursor)


def is_cut(event: dict[str, Any]) -> bool:
    """Whether ``event`` is the error ``until_cut`` ends a stream with (the reply itself goes on)."""
    return event["event"] == "error" and json.loads(event["data"]).get("code") == DRAINING


async def until_cut(events: AsyncIterator[dict[str, Any]], drain: Drain, retry_after: int) -> AsyncIterator[dict[str, Any]]:
    """``events`` until they end, or until the drain deadline: then a ``gateway_draining`` error.

    The error carries the last cursor sent, so a client's ``Last-Event-ID`` is right either way.
    """
    source = aiter(events)
    cut = asyncio.ensure_future(drain.cut())
    pending: asyncio.Future[dict[str, Any]] | None = None
    cursor: str | None = None
    try:
        while True:
            pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending, cut}, return_when=asyncio.FIRST_COMPLETED)
            if pending not in done:
                yield draining_error(cursor, retry_after)
                return
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            cursor = event.get("id", cursor)
            yield event
    finally:
        cut.cancel()
        if pending is not None:  # cut, or our reader went away: stop the source where it waits
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        closer = getattr(source, "aclose", None)
        if closer is not None:
            with contextlib.suppress(BaseException):
                await closer()
