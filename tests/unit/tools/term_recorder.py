"""A child for test_supervisor.py: ready (parley_ready, on its metrics port) after READY_AFTER_S; on SIGTERM it
writes when it was told and when it left, then exits 0."""

import os
import signal
import sys
import time
from pathlib import Path

from parley.metrics import Readiness, serve_from_env

out = Path(os.environ["RECORD_DIR"]) / sys.argv[1]


def leave(*_: object) -> None:
    told = time.monotonic()
    time.sleep(0.3)  # a drain's worth of work
    out.write_text(f"{told} {time.monotonic()}")
    sys.exit(0)


signal.signal(signal.SIGTERM, leave)
readiness = Readiness()
serve_from_env(sys.argv[1])
time.sleep(float(os.environ.get("READY_AFTER_S", "0")))
readiness.ready()
while True:
    time.sleep(0.05)
