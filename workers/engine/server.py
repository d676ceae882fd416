"""Start the CPU engine: pick the backend, build the app, run uvicorn.

``serve(settings)`` is what ``parley engine`` calls; ``python -m workers.engine``
parses the same settings from flags (over the ``PARLEY_ENGINE_*`` environment).
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import fields, replace
from typing import Any

from parley.errors import ConfigError
from parley.settings import from_env
from workers.engine.app import create_app
from workers.engine.request import Backend
from workers.engine.settings import BACKENDS, EngineSettings

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    """``time level logger message key=value ...``: the ``extra`` fields, never free text from requests."""

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD)
        return f"{base} {extras}" if extras else base


def make_backend(settings: EngineSettings) -> Backend:
    if settings.backend == "synthetic":
        from workers.engine.synthetic import SyntheticBackend

        return SyntheticBackend(settings)
    from workers.engine.batcher import TorchBackend

    return TorchBackend(settings)  # torch and random


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("workers.engine")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def serve(settings: EngineSettings) -> None:
    """Serve SGLang's native API subset on ``settings.host:settings.port`` until interrupted."""
    import uvicorn

    _configure_logging(settings.log_level)
    backend = make_backend(settings)
    if backend.untrained:
        logging.getLogger("workers.engine").warning(
            "serving an UNTRAINED random model: replies are noise; PARLEY_ENGINE_BACKEND=torch serves a real one"
        )
    info = {"backend": settings.backend, "host": settings.host, "port": settings.port}
    app = create_app(backend, info, incremental_streaming_output=settings.incremental_streaming_output)
    # Access logs carry no bodies, but they add nothing the engine's own lines lack.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(), access_log=False)


def parse_args(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> EngineSettings:
    base = from_env(EngineSettings, environ)
    parser = argparse.ArgumentParser(prog="python -m workers.engine", description="Parley's CPU engine (SGLang's native API).")
    flags = {
        "host": str, "port": int, "backend": str, "model_dir": str, "max_batch": int, "context_length": int,
        "max_total_tokens": int, "synthetic_ttft_ms": float, "synthetic_tokens_per_s": float,
        "synthetic_cache_tokens": int, "threads": int, "seed": int, "log_level": str,
    }
    docs = {f.name: f"{f.metadata['doc']} (env {f.metadata['env']}, now {getattr(base, f.name)!r})" for f in fields(EngineSettings)}
    for name, kind in flags.items():
        extra: dict[str, Any] = {"choices": BACKENDS} if name == "backend" else {}
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=None, help=docs[name], **extra)
    parser.add_argument(
        "--incremental-streaming-output",
        dest="incremental_streaming_output",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=docs["incremental_streaming_output"],
    )
    args = parser.parse_args(argv)
    chosen = {k: v for k, v in vars(args).items() if v is not None}
    return replace(base, **chosen)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from parley import metrics

    metrics.serve_from_env("engine")  # process figures; the engine's own series are SGLang's business
    serve(settings)
    return 0
