"""`python -m gateway`: serve the gateway with uvicorn (also `parley gateway`).

SIGTERM drains before uvicorn shuts down: uvicorn alone would stop listening at
once (readiness probes and new requests refused rather than answered 503) and
then wait for every SSE stream. Here the first SIGTERM starts ``app.drain``
(unready, new streams 503, live ones finish or are told to resume elsewhere by
PARLEY_GATEWAY_DRAIN_S), and only then does uvicorn shut down; the process
exits 0. A second SIGTERM, or SIGINT, is uvicorn's usual immediate shutdown.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from gateway.app import create_app, drain
from gateway.settings import GatewaySettings
from parley.logs import setup_logging
from parley.metrics import serve_from_env
from parley.settings import CassandraSettings, KafkaSettings, from_env

log = logging.getLogger("gateway")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self._app = app
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._drain is None and self._loop is not None and self.started:
            # Not recorded in uvicorn's captured signals: it would re-raise it on exit (status 143, not 0).
            self._loop.call_soon_threadsafe(self._begin_drain)
            return
        super().handle_exit(sig, frame)

    def _begin_drain(self) -> None:
        if self._drain is None:
            self._drain = asyncio.create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await drain(self._app)
        except Exception:
            log.exception("drain failed; shutting down now")
        self.should_exit = True


#: Collector thresholds for a process whose objects are a few hundred per live stream and a few per chunk.
#: With the defaults (700, 10, 10) a chunk that waited a few milliseconds in a queue was promoted, the
#: old generation filled with them, and full collections of every stream's objects ran every few seconds,
#: each a pause of 100-300 ms at 500-1,000 streams (bench/fanout.py, a third of the process's CPU). Here
#: only what outlives about a quarter of a second at full load is promoted, and full collections are rare.
GC_THRESHOLDS = (10_000, 20, 20)


def serve(settings: GatewaySettings | None = None) -> None:
    settings = settings or from_env(GatewaySettings)
    setup_logging("gateway")
    serve_from_env("gateway")  # PARLEY_METRICS_PORT, as every service: /metrics is never on the API port
    app = create_app(settings, from_env(KafkaSettings), from_env(CassandraSettings))
    gc.freeze()  # what import and set-up made lives as long as the process: no collection need look at it
    gc.set_threshold(*GC_THRESHOLDS)
    # Access logs stay off: paths carry ids only, but one line per token stream adds nothing. Proxy headers are
    # the app's (gateway/client_address.py, PARLEY_GATEWAY_TRUSTED_PROXIES), not uvicorn's FORWARDED_ALLOW_IPS.
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=30,
        proxy_headers=False,
    )
    DrainingServer(config, app).run()


if __name__ == "__main__":
    serve()
