"""What the gateway knows of pool pressure, to refuse a turn before appending it.

The same heartbeats the router reads (``fleet.heartbeats``), folded by the same
``streams.fleet.Fleet`` and judged by the same ``streams.admission.admit`` with
the router's thresholds (``PARLEY_ROUTER_*``): if even the cheapest pool would
shed this tier's turn, the gateway answers 503 + Retry-After at once instead of
appending a turn the router would reject. Anything the gateway cannot judge
(no heartbeats yet) goes through to the router, which decides for real.
"""

from __future__ import annotations

import logging
import threading
import time

from parley.errors import Unavailable
from parley.settings import KafkaSettings
from streams.admission import AdmissionConfig, Shed, admit
from streams.classify import RANKS
from streams.fleet import Fleet, pool_load
from streams.readers import HeartbeatReader

log = logging.getLogger(__name__)


class PoolPressure:
    def __init__(self, kafka: KafkaSettings, admission: AdmissionConfig, pools: list[str], expiry_s: float) -> None:
        self._kafka = kafka
        self._admission = admission
        self._cheapest = min(pools, key=RANKS.index)
        self._fleet = Fleet(expiry_s)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-pressure", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def shed(self, tier: str) -> Shed | None:
        """The router's verdict on this tier's next turn in the cheapest pool, if it would be shed."""
        now = time.monotonic()
        with self._lock:
            load = pool_load(self._fleet.replicas(self._cheapest, now))
        if load is None:
            return None
        verdict = admit(tier, self._cheapest, {self._cheapest: load}, self._admission)
        return verdict if isinstance(verdict, Shed) else None

    def _run(self) -> None:
        reader: HeartbeatReader | None = None
        while not self._stop.is_set():
            try:
                reader = reader or HeartbeatReader(self._kafka)
                beats = reader.poll(timeout=0.5)
            except Unavailable as exc:
                log.warning("heartbeats unavailable", extra={"error": type(exc).__name__})
                time.sleep(1.0)
                continue
            now = time.monotonic()
            with self._lock:
                for beat in beats:
                    self._fleet.observe(beat, now)
        if reader is not None:
            reader.close()
