"""What every handler shares: the process's clients, and the steps every write takes."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from gateway.auth import Authenticator, Principal
from gateway.drain import Drain
from gateway.errors import NotFound, ServiceUnavailable
from gateway.recent import Recent
from gateway.tracing import trace_for
from parley.metrics import ADMISSION
from gateway.settings import GatewaySettings
from gateway.store import ConversationRow, MessageRow, Store
from gateway.tokens import TokenStreams
from parley.errors import Unavailable
from parley.kafka import EventProducer
from schemas.events import DocumentEvent, Event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DocumentServices:
    settings: Any  # documents.settings.DocumentSettings
    blobs: Any  # documents.blobs.BlobStore: the originals
    index: Any  # documents.index.DocumentIndex: the pages' text


@dataclass
class Services:
    settings: GatewaySettings
    store: Store
    producer: EventProducer
    tokens: TokenStreams
    auth: Authenticator
    session: Any
    pressure: Any  # gateway.pressure.PoolPressure: refuse what the router would shed
    background: set[asyncio.Task] = field(default_factory=set)  # abandonment watches
    quotas: Any = None  # gateway.quotas.Quotas: tokens/day and requests/minute per tier, set by the app's lifespan
    drain: Drain = field(default_factory=Drain)  # SIGTERM: readiness off, new streams refused, live ones cut at a deadline
    recent: Recent = field(default_factory=Recent)  # what posting needs while Cassandra is down
    broker_up: bool = True  # the last probe of Kafka answered (gateway/app.py watch_broker)
    documents: Any = None  # DocumentServices: uploads' settings, blob store and page reader, set by the app's lifespan
    directory: Any = None  # gateway.directory.Directory: organisations, users, keys
    keys: Any = None  # parley.keys.KeyService: seals and opens content
    erasures: Any = None  # streams.erasure_rows.ErasureRows: erasure requests and their progress
    tools: Any = None  # parley.tool_registry.ToolConfig: the tools a turn may offer (PARLEY_TOOLS_FILE)
    tool_calls: Any = None  # streams.tool_store.ToolStore: the broker's record of each call, read here
    org_tools: Any = None  # parley.org_tools.OrgTools: the MCP servers organisations registered
    atomic: Any = None  # parley.kafka.AtomicAppender: appends seen whole or not at all (imports)
    experiments: Any = None  # gateway.experiments.Experiments: the running experiments, each turn's arm
    search: Any = None  # streams.search_index.SearchIndex: the search processor's index, queried by GET /v1/search

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def log_unavailable(self) -> ServiceUnavailable:
        return ServiceUnavailable(
            "the event log is not accepting writes right now; retry shortly",
            code="log_unavailable",
            retry_after=self.settings.retry_after_s,
        )

    def admit_stream(self, *, appends: bool) -> None:
        """503 + Retry-After for a new stream when this process is leaving, or (``appends``: a new
        turn) cannot reach Kafka."""
        if self.drain.draining:
            raise ServiceUnavailable(
                "this gateway is shutting down; retry on another one", code="gateway_draining", retry_after=self.settings.retry_after_s
            )
        if appends and not self.broker_up:
            raise self.log_unavailable()

    async def append(self, *events: Event) -> None:
        """Append events (same key → same partition, in order) and wait for the broker's acknowledgement.

        The wait is bounded (PARLEY_GATEWAY_APPEND_TIMEOUT_S): a 503 then means "not known to be
        appended"; librdkafka may still deliver it, and a retry with the same ids is a no-op.
        """
        if not self.broker_up:
            raise self.log_unavailable()
        try:
            await asyncio.wait_for(
                asyncio.gather(*(self.producer.send(e) for e in events)), timeout=self.settings.append_timeout_s
            )
        except (Unavailable, asyncio.TimeoutError) as exc:
            log.warning("append failed", extra={"error": type(exc).__name__})
            raise self.log_unavailable() from exc

    async def append_atomically(self, events: list[Event]) -> None:
        """Append ``events`` in one Kafka transaction: readers see all of them or none. 503 when the broker
        did not commit it (then none is seen, unless a commit that timed out landed after all: the events'
        ids are derived, so the client's retry is a no-op)."""
        if not self.broker_up:
            raise self.log_unavailable()
        try:
            await asyncio.to_thread(self.atomic.append, events)
        except Unavailable as exc:
            log.warning("atomic append failed", extra={"error": type(exc).__name__})
            raise self.log_unavailable() from exc

    async def write_through(self, *events: Event, state: Any = None) -> None:
        """Write appended events' rows now (read-your-writes), best effort: the materializer writes
        the same rows from the log, so a Cassandra outage only delays them."""
        for event in events:
            self.recent.appended(event)
            try:
                await self.store.write_through(event, state)  # type: ignore[arg-type]
            except Unavailable as exc:
                log.warning("write-through skipped; the materializer will write it", extra={"error": type(exc).__name__})

    async def write_document(self, event: DocumentEvent) -> None:
        """``write_through`` for a document's status row: the upload is listed, a delete is gone, at once."""
        try:
            await self.store.write_document(event)
        except Unavailable as exc:
            log.warning("write-through skipped; the materializer will write it", extra={"error": type(exc).__name__})

    def admit_tier(self, tier: str) -> None:
        """503 + Retry-After now when the router would shed this turn anyway: nothing is appended."""
        shed = self.pressure.shed(tier)
        if shed is not None:
            ADMISSION.labels("gateway", shed.pool, tier, "shed").inc()
            raise ServiceUnavailable(
                "Parley is overloaded right now; retry after the indicated time",
                code="overloaded",
                retry_after=shed.retry_after_s,
            )

    async def owned(self, user: Principal, conversation_id: str, *, cached_ok: bool = False) -> ConversationRow:
        """The user's conversation, else 404. ``cached_ok``: while Cassandra is down, one this
        process served recently will do (its owner never changes)."""
        try:
            conversation = await self.store.conversation(conversation_id)
        except Unavailable:
            conversation = self.recent.conversation(conversation_id) if cached_ok else None
            if conversation is None:
                raise
        else:
            if conversation is not None:
                self.recent.saw(conversation)
        if conversation is None or conversation.user_id != user.user_id:
            raise NotFound("no such conversation")  # another user's conversation is indistinguishable from none
        return conversation

    async def for_posting(self, user: Principal, conversation_id: str) -> tuple[ConversationRow, list[MessageRow]]:
        """The user's conversation and its tree (messages without their text), read at once (two Cassandra reads
        in parallel: this is on every turn's way to its first token, so nothing is opened that grows with the
        conversation's text); 404 before anything of a conversation not theirs is used."""
        owned, listed = await asyncio.gather(
            self.owned(user, conversation_id, cached_ok=True), self.store.tree(conversation_id), return_exceptions=True
        )
        if isinstance(owned, BaseException):
            raise owned
        if isinstance(listed, Unavailable):
            cached = self.recent.messages(owned.id)
            if cached is None:
                raise listed
            return owned, cached
        if isinstance(listed, BaseException):
            raise listed
        self.recent.saw(owned, listed)
        return owned, listed

    async def messages_for_posting(self, conversation: ConversationRow) -> list[MessageRow]:
        """The conversation's messages; while Cassandra is down, as this process last knew them."""
        try:
            messages = await self.store.messages(conversation.id)
        except Unavailable:
            cached = self.recent.messages(conversation.id)
            if cached is None:
                raise
            return cached
        self.recent.saw(conversation, messages)
        return messages


def services(request: Request) -> Services:
    return request.app.state.services


def trace_id(request: Request) -> str:
    """The request's trace id, chosen once by gateway.tracing.TraceMiddleware."""
    return getattr(request.state, "trace_id", "") or trace_for(request.headers.get("x-request-id"))

