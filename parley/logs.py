"""Structured JSON logs on stderr, one object per line. Never pass message text in ``extra``."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

from parley.settings import TelemetrySettings, from_env

#: The trace id of the request or event being handled: every log line made meanwhile carries it.
TRACE_ID: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default="")


def trace_context(trace_id: str) -> contextvars.Context:
    """A context for ``asyncio.create_task(..., context=)``: the task's log lines carry ``trace_id``."""
    ctx = contextvars.copy_context()
    ctx.run(TRACE_ID.set, trace_id)
    return ctx


_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if trace := TRACE_ID.get():
            out["trace_id"] = trace
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(service: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(from_env(TelemetrySettings).log_level.upper())
    # Libraries that log request URLs or payloads (httpx, httpcore: a fetched page's address; mcp, httpx2: a
    # tool call's arguments and result at DEBUG) stay at WARNING whatever the level: never a user's content.
    for noisy in ("cassandra", "aiokafka", "faust", "mode", "httpx", "httpcore", "mcp", "httpx2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
