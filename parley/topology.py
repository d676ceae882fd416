"""The topology, written once: every service, what it reads and writes, how to start it.

`parley run` starts these in order, `make run` calls it, the e2e tests start
the same list, and docs/operations.md quotes it. Follow a message through it in
this order (DESIGN.md §1).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Service:
    name: str
    module_args: tuple[str, ...]  # `python -m <these>`
    consumes: tuple[str, ...] = ()
    produces: tuple[str, ...] = ()
    group: str | None = None  # consumer group; scale by starting more of it
    health_url: str | None = None  # answered 200 once ready ({port} filled from settings)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", *self.module_args]


ENGINE = Service(
    "engine",
    ("workers.engine",),
    health_url="http://127.0.0.1:{engine_port}/health",
)
WORKER_SMALL = Service(
    "worker-small",
    ("workers", "--pool", "small"),
    consumes=("chat.inference.small", "chat.control"),
    produces=("chat.tokens", "chat.events", "chat.usage", "fleet.heartbeats"),
    group="workers.small",
)
CONTEXT = Service(
    "context",
    ("streams", "context"),
    consumes=("chat.events",),
    produces=("chat.inference", "chat.tokens", "chat.events"),  # the last two only to fail a turn it cannot build
    group="streams.context",
)
ROUTER = Service(
    "router",
    ("streams", "router"),
    consumes=("chat.inference",),
    produces=("chat.inference.small", "chat.inference.medium", "chat.inference.frontier"),
    group="streams.router",
)
MATERIALIZER = Service(
    "materializer",
    ("streams", "materializer"),
    consumes=("chat.events", "chat.tokens"),  # chat.tokens: checkpoints of replies still streaming
    group="streams.materializer",
)
GATEWAY = Service(
    "gateway",
    ("gateway",),
    consumes=("chat.tokens",),
    produces=("chat.events",),
    health_url="http://127.0.0.1:{gateway_port}/readyz",
)

#: Start order: engines before the workers that call them, processors before the gateway takes traffic.
SERVICES: tuple[Service, ...] = (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, MATERIALIZER, GATEWAY)
