"""The running experiments as this gateway knows them, to stamp each turn with its user's arm.

A thread reads ``ops.experiments`` whole from the beginning outside any group (``streams.readers.
ExperimentReader``: every gateway needs every experiment) and folds it into ``streams.experiments.Running``;
``assignment`` answers from that fold without waiting on anything. At start-up the gateway waits (up to
``READY_WAIT_S``) until the topic was read to its end once, so its first turns do not miss a running
experiment. A start or stop reaches a gateway within a poll (half a second) of being committed; a turn
asked for meanwhile carries the previous state's arm, and the report groups it by what it carried. While the
topic cannot be read, the last state read stands.
"""

from __future__ import annotations

import logging
import threading
import time

from parley.errors import Unavailable
from parley.settings import KafkaSettings
from schemas.events import Assignment
from streams.experiments import Running
from streams.readers import ExperimentReader

log = logging.getLogger(__name__)

#: How long start-up waits for the running set (Kafka answered the schema registry just before: it is up).
READY_WAIT_S = 10.0


class Experiments:
    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka
        self._running = Running()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-experiments", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_ready(self, timeout_s: float = READY_WAIT_S) -> bool:
        """Block until ops.experiments was read to its end once (or ``timeout_s``); whether it was."""
        if not self._ready.wait(timeout_s):
            log.warning("experiments not read yet: turns carry no arm until they are", extra={"waited_s": timeout_s})
            return False
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def assignment(self, user_id: str, tier: str) -> Assignment | None:
        with self._lock:
            return self._running.assignment(user_id, tier)

    def _publish(self, running: Running) -> None:
        with self._lock:
            self._running = Running(dict(running.experiments))

    def _run(self) -> None:
        reader: ExperimentReader | None = None
        while not self._stop.is_set():
            try:
                reader = reader or ExperimentReader(self._kafka)
                if not self._ready.is_set():
                    self._publish(reader.to_end(READY_WAIT_S))
                    self._ready.set()
                elif reader.poll(timeout=0.5):
                    self._publish(reader.running)
            except Unavailable as exc:
                log.warning("experiments unavailable", extra={"error": type(exc).__name__})
                time.sleep(1.0)
        if reader is not None:
            reader.close()
