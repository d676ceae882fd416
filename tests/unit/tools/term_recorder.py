"""A child for test_supervisor.py: on SIGTERM it writes when it was told and when it left, then exits 0."""

import os
import signal
import sys
import time
from pathlib import Path

out = Path(os.environ["RECORD_DIR"]) / sys.argv[1]


def leave(*_: object) -> None:
    told = time.monotonic()
    time.sleep(0.3)  # a drain's worth of work
    out.write_text(f"{told} {time.monotonic()}")
    sys.exit(0)


signal.signal(signal.SIGTERM, leave)
while True:
    time.sleep(0.05)
