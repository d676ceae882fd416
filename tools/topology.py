"""The topology, written once: every service, what it reads and writes, how to start it.

`parley run` starts these (tools/supervisor.py), `make run` calls it, the e2e tests start
the same list, and docs/operations.md quotes it. Follow a message through it in
this order (DESIGN.md §1).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
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
def _worker(pool: str) -> Service:
    # Locally every pool's worker drives the one CPU engine (PARLEY_WORKER_ENGINE_URLS); in production each pool
    # has its own engines, and more workers of a pool join its group.
    return Service(
        f"worker-{pool}",
        ("workers", "--pool", pool),
        consumes=(f"chat.inference.{pool}", "chat.control"),
        produces=("chat.tokens", "chat.events", "chat.usage", "fleet.heartbeats"),
        group=f"workers.{pool}",
    )


WORKER_SMALL = _worker("small")
WORKER_MEDIUM = _worker("medium")
WORKER_FRONTIER = _worker("frontier")
CONTEXT = Service(
    "context",
    ("streams", "context"),
    consumes=("chat.events", "user.memory"),  # user.memory: read whole, outside the group (every prompt's facts)
    # chat.tokens + chat.events: to fail a turn it cannot build, or stop one a strict moderation policy flags
    produces=("chat.inference", "chat.tokens", "chat.events", "chat.moderation"),
    group="streams.context",
)
ROUTER = Service(
    "router",
    ("streams", "router"),
    consumes=("chat.inference", "fleet.heartbeats"),  # fleet.heartbeats: read whole, outside the group
    # chat.events + chat.tokens: only to end a turn it sheds (overloaded) or cannot place (unknown_model)
    produces=("chat.inference.small", "chat.inference.medium", "chat.inference.frontier", "chat.events", "chat.tokens"),
    group="streams.router",
)
MATERIALIZER = Service(
    "materializer",
    ("streams", "materializer"),
    # chat.tokens: checkpoints of replies still streaming; docs.events: each document's status row
    consumes=("chat.events", "chat.tokens", "user.memory", "docs.events"),
    group="streams.materializer",
)
#: The extraction pool: checks, extracts (OCR where needed), chunks, embeds and indexes uploads, off the chat path.
DOCUMENTS = Service(
    "documents",
    ("documents",),
    consumes=("docs.events",),  # DocumentUploaded: a job; DocumentDeleted: stop it, purge the index and the original
    produces=("docs.events",),  # DocumentPagesExtracted per batch of pages, then DocumentIndexed or DocumentFailed
    group="documents",
)
USAGE = Service(
    "usage",
    ("streams", "usage"),
    consumes=("chat.usage",),  # folded into usage_by_request, which quotas and GET /v1/usage sum
    group="streams.usage",
)
TITLER = Service(
    "titler",
    ("streams", "titler"),
    consumes=("chat.events",),  # a conversation's first question and reply
    produces=("chat.events",),  # ConversationRenamed(by="auto"), once per conversation
    group="streams.titler",
)
#: "Search my conversations": titles and message text into each user's keyed index (streams/search_indexer.py).
SEARCH = Service(
    "search",
    ("streams", "search"),
    consumes=("chat.events",),  # titles, messages, replies; a moderated reply withdrawn; a deleted conversation dropped
    group="streams.search",
)
#: Beside the chat path, never in front of it: a turn's input and its reply's windows checked as they stream.
MODERATION = Service(
    "moderation",
    ("streams", "moderation"),
    consumes=("chat.events", "chat.tokens"),  # MessagePosted/GenerationRequested: the input; TokenChunk: the reply
    # every check; a flag: GenerationModerated (the turn's notice) and GenerationCancelRequested (the cut)
    produces=("chat.moderation", "chat.events", "chat.control"),
    group="streams.moderation",
)
#: Erasures carried out to the end: a request's deletes, the data key destroyed, the rows purged, UserErased.
ERASURE = Service(
    "erasure",
    ("streams", "erasure"),
    consumes=("user.erasures",),  # ErasureRequested: a job; UserErased: its own last step, read back
    produces=("chat.events", "docs.events", "user.memory", "user.erasures"),  # the deletes, then UserErased
    group="streams.erasure",
)
#: Parley's own tools (DESIGN.md §13): the permission broker judges each call and continues the turn; the
#: executor runs what was cleared, at most once.
TOOL_BROKER = Service(
    "tools",
    ("streams", "tools"),
    consumes=("chat.events",),  # turns that offer Parley's tools, their replies' calls, answers, results
    produces=("chat.events", "chat.tools"),  # decisions, endings of calls not run, continuations; cleared calls
    group="streams.tools",
)
TOOL_EXECUTOR = Service(
    "tool-executor",
    ("streams.tool_executor",),  # workers/tool_executor.py with the built-ins over the users' data
    consumes=("chat.tools",),  # and outside the group: chat.events (each call's lookup), user.memory
    produces=("chat.events", "user.memory"),  # ToolCallStarted, ToolCallFinished (+ a remember's MemoryUpdated)
    group="tools",
)
GATEWAY = Service(
    "gateway",
    ("gateway",),
    # outside any group: live streams' partitions; pool pressure; the running experiments (each turn's arm)
    consumes=("chat.tokens", "fleet.heartbeats", "ops.experiments"),
    # turns and edits; cancels; a user's memory; erasure requests
    produces=("chat.events", "chat.control", "user.memory", "user.erasures"),
    health_url="http://127.0.0.1:{gateway_port}/readyz",
)

#: In front of sharded gateways (PARLEY_GATEWAY_SHARD): HAProxy, configured by Parley (edge/), sends each
#: conversation's requests to the gateway that owns its chat.tokens partition. `python -m edge` execs haproxy, so
#: this child's pid is HAProxy's, and its metrics (PARLEY_METRICS_PORT) are HAProxy's Prometheus exporter. Not in
#: SERVICES: `parley run` runs one unsharded gateway, which needs none; `tools.isolated.start(gateways=N)` and
#: production put it in front.
EDGE = Service(
    "edge",
    ("edge",),
    health_url="http://127.0.0.1:{edge_port}/edge/readyz",
)

#: Start order: engines before the workers that call them, processors before the gateway takes traffic.
SERVICES: tuple[Service, ...] = (
    ENGINE, WORKER_SMALL, WORKER_MEDIUM, WORKER_FRONTIER, CONTEXT, ROUTER, MATERIALIZER, USAGE, TITLER, SEARCH,
    MODERATION, DOCUMENTS, ERASURE, TOOL_BROKER, TOOL_EXECUTOR, GATEWAY,
)
#: What one chat turn passes through, and nothing beside it (titles, search, usage, moderation, documents): a stack for
#: a test of the chat path alone starts in about two thirds of the CPU time.
CHAT_PATH: tuple[Service, ...] = tuple(
    s for s in SERVICES if s not in (USAGE, TITLER, SEARCH, MODERATION, DOCUMENTS, ERASURE, TOOL_BROKER, TOOL_EXECUTOR)
)


def deployment_groups(ids: Iterable[str], streams_group_prefix: str = "", topic_prefix: str = "") -> list[str]:
    """The groups of this deployment's topology (pure): other stacks on the cluster are left out.

    Processor groups carry ``PARLEY_STREAMS_GROUP_PREFIX``; worker groups the topic prefix.
    """
    names = {s.group for s in SERVICES if s.group}
    ours = {(streams_group_prefix if n.startswith("streams.") else topic_prefix) + n for n in names}
    return sorted(g for g in ids if g in ours)
