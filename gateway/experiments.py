"""The running experiments as this gateway knows them, to stamp each turn with its user's arm.

A thread reads ``ops.experiments`` whole from the beginning outside any group (``streams.readers.
ExperimentReader``: every gateway needs every experiment) and folds it into ``streams.experiments.Running``;
``assignment`` answers from that fold without waiting on anything. A start or stop reaches a gateway within
a poll (half a second) of being committed; a turn asked for meanwhile carries the previous state's arm,
and the report groups it by what it carried. While the topic cannot be read, the last state read stands.
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


class Experiments:
    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka
        self._running = Running()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-experiments", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def assignment(self, user_id: str, tier: str) -> Assignment | None:
        with self._lock:
            return self._running.assignment(user_id, tier)

    def _run(self) -> None:
        reader: ExperimentReader | None = None
        while not self._stop.is_set():
            try:
                reader = reader or ExperimentReader(self._kafka)
                if reader.poll(timeout=0.5):
                    with self._lock:
                        self._running = Running(dict(reader.running.experiments))
            except Unavailable as exc:
                log.warning("experiments unavailable", extra={"error": type(exc).__name__})
                time.sleep(1.0)
        if reader is not None:
            reader.close()
