"""Whether the engine may be given work: suspected down until its health endpoint answers.

A worker takes no records while its engine is suspected (at start, and after a
generation failed with ``engine_unavailable``): a record taken then would only
fail. Probes are spaced ``PROBE_S`` apart so a dead engine is not hammered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from workers.engine_api import EngineClient

log = logging.getLogger(__name__)

#: Seconds between engine health probes while the engine is suspected down.
PROBE_S = 1.0


class EngineHealth:
    def __init__(self, engine: EngineClient, engine_url: str, clock: Callable[[], float]) -> None:
        self._engine = engine
        self._engine_url = engine_url
        self._clock = clock
        self._suspect = True  # probe before the first request
        self._last_probe = float("-inf")

    def suspect(self) -> None:
        """A generation found the engine unreachable: take nothing more until a probe answers."""
        self._suspect = True

    async def ready(self) -> bool:
        """False while the engine is suspected down; probes its health at most every PROBE_S."""
        if not self._suspect:
            return True
        now = self._clock()
        if now - self._last_probe < PROBE_S:
            return False
        self._last_probe = now
        try:
            async with asyncio.timeout(5.0):
                healthy = await self._engine.health()
        except Exception:
            healthy = False
        if healthy:
            self._suspect = False
            log.info("engine is healthy; taking requests", extra={"engine_url": self._engine_url})
        else:
            log.warning(
                "engine is not healthy; not taking requests (check the engine at PARLEY_WORKER_ENGINE_URLS)",
                extra={"engine_url": self._engine_url},
            )
        return healthy
