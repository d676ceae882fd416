"""Retrying what must not be skipped while a dependency is away (Kafka or Cassandra).

The event in hand is not acknowledged meanwhile, so an outage delays the work
instead of losing it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from parley.errors import StoreUnavailable, Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


async def retrying(
    what: str,
    attempt_once: Callable[[], Awaitable[T]],
    max_pause_s: float,
    *,
    on: type[Unavailable] = StoreUnavailable,
    first_pause_s: float = 0.2,
    ids: Mapping[str, object] | None = None,
) -> T:
    """Call ``attempt_once()`` until it stops raising ``on``, backing off from ``first_pause_s`` up to
    ``max_pause_s``; each failure is logged with ``ids`` (never message text)."""
    pause = first_pause_s
    failures = 0
    while True:
        try:
            return await attempt_once()
        except on as exc:
            failures += 1
            log.warning(
                f"{what} failed; retrying",
                extra={**(ids or {}), "attempt": failures, "retry_in_s": pause, "error": str(exc)},
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, max_pause_s)
