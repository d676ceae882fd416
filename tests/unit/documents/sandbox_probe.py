"""What a taken-over extraction child would try, run inside ``documents.sandbox`` by test_sandbox: prints JSON."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any


def attempt(port: str, path: str) -> dict[str, Any]:
    """Connect to 127.0.0.1:``port``, read ``path``, write in the working directory: each result or its error."""
    out: dict[str, Any] = {"env": dict(os.environ), "cwd": os.getcwd()}
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=5):
            out["connect"] = "connected"
    except OSError as exc:
        out["connect"] = type(exc).__name__
    try:
        with open(path, "rb") as secret:
            out["read"] = secret.read().decode()
    except OSError as exc:
        out["read"] = type(exc).__name__
    try:
        with open("scratch", "w") as scratch:
            out["write_home"] = scratch.write("ok") == 2
    except OSError as exc:
        out["write_home"] = type(exc).__name__
    return out


def probe(confined: dict, port: str, path: str) -> None:
    json.dump({"confined": confined, **attempt(port, path)}, sys.stdout)


def signal_parent(confined: dict) -> None:
    """Try to stop the process that started the child (the worker, in production)."""
    import signal

    try:
        os.kill(os.getppid(), signal.SIGCONT)  # harmless if it were delivered; the question is whether it may be
        json.dump({"signal": "sent"}, sys.stdout)
    except OSError as exc:
        json.dump({"signal": type(exc).__name__}, sys.stdout)
