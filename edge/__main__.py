"""`python -m edge` (also `parley edge`): the thin router in front of sharded gateways (edge/proxy.py).

SIGTERM or SIGINT stops it: it stops listening and closes its connections; SSE clients resume
through another edge with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import signal

from edge.proxy import run
from edge.settings import EdgeSettings
from parley.logs import setup_logging
from parley.metrics import serve_from_env
from parley.settings import from_env


async def _main() -> None:
    settings = from_env(EdgeSettings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run(settings, stop)


def main() -> None:
    setup_logging("edge")
    serve_from_env("edge")
    asyncio.run(_main())


if __name__ == "__main__":
    main()
