"""The processors' Cassandra edge: load a conversation's tree, execute writes.

The driver answers on its own thread; ``_run`` turns its futures into asyncio
ones, so a query never blocks the faust event loop (a blocked loop misses
Kafka heartbeats and loses its partitions). Driver errors become
``StoreUnavailable`` here; what to do about them (retry, wait) is the
caller's decision.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar

from cassandra import DriverException, RequestExecutionException
from cassandra.cluster import NoHostAvailable, ResponseFuture, Session
from cassandra.query import PreparedStatement

from parley.cassandra import connect
from parley.errors import StoreUnavailable
from parley.settings import CassandraSettings
from schemas.events import MemoryUpdated
from streams import memory
from streams.checkpoint import StoredReply
from streams.projection import EPOCH, Write, cql
from streams.tree import FINAL_STATUSES, Conversation, Message, frozen_messages

log = logging.getLogger(__name__)
T = TypeVar("T")

_CONVERSATION = "SELECT user_id, title, model, created_at, selected_leaf_id FROM conversations WHERE conversation_id = ?"
_MESSAGES = (
    "SELECT message_id, parent_id, role, content, status, finish_reason, created_at "
    "FROM messages WHERE conversation_id = ?"
)
_REPLY = "SELECT content, tokens, status FROM messages WHERE conversation_id = ? AND message_id = ?"
_ERRORS = (NoHostAvailable, RequestExecutionException, DriverException, OSError)


def _us(value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:  # the driver hands back naive UTC datetimes
        value = value.replace(tzinfo=timezone.utc)
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _id(value: Any) -> str | None:
    return None if value is None else str(value)


def state_from_rows(conversation_id: str, conversation: Any | None, messages: Iterable[Any]) -> Conversation:
    """A tree state from the materialized rows (pure; rows are anything with the selected attributes).

    A reply that ended counts as answered. One still ``streaming`` does not
    count as requested: the rows cannot tell whether the context builder ever
    sent it on, and a generation sent twice (at-least-once) beats one lost.
    """
    msgs: dict[str, Message] = {}
    answered: set[str] = set()
    for r in messages:
        if r.status is None:
            # Only a checkpoint wrote it (chat.tokens ran ahead of chat.events): the
            # log has not said what it is yet, and its GenerationRequested must not be
            # taken for a repeat when it comes.
            continue
        mid = str(r.message_id)
        msgs[mid] = Message(
            mid, _id(r.parent_id), r.role or "", r.content or "", r.status or "", r.finish_reason, _us(r.created_at)
        )
        if r.role == "assistant" and r.status in FINAL_STATUSES:
            answered.add(mid)
    if conversation is None:
        return Conversation(conversation_id=conversation_id, messages=frozen_messages(msgs), answered=frozenset(answered))
    return Conversation(
        conversation_id=conversation_id,
        user_id=conversation.user_id or "",
        title=conversation.title or "",
        model=conversation.model,
        created_at=_us(conversation.created_at),
        selected_leaf_id=_id(conversation.selected_leaf_id),
        messages=frozen_messages(msgs),
        answered=frozenset(answered),
    )


class Store:
    """One Cassandra session for a processor, opened on first use."""

    def __init__(self, settings: CassandraSettings) -> None:
        self._settings = settings
        self._session: Session | None = None
        self._connecting = asyncio.Lock()  # concurrent first queries must share one connection
        self._prepared: dict[Any, PreparedStatement] = {}

    async def session(self) -> Session:
        async with self._connecting:
            if self._session is None:
                loop = asyncio.get_running_loop()
                # connect() blocks for up to its timeout: keep it off the event loop.
                self._session = await loop.run_in_executor(None, connect, self._settings, self._settings.keyspace)
            return self._session

    async def _prepare(self, key: Any, text: str) -> PreparedStatement:
        stmt = self._prepared.get(key)
        if stmt is None:
            session = await self.session()
            loop = asyncio.get_running_loop()
            stmt = await loop.run_in_executor(None, session.prepare, text)
            self._prepared[key] = stmt
        return stmt

    async def _run(self, key: Any, text: str, values: tuple[Any, ...]) -> list[Any]:
        try:
            stmt = await self._prepare(key, text)
            session = await self.session()
            return await _result(session.execute_async(stmt, values))
        except StoreUnavailable:
            raise
        except _ERRORS as exc:
            raise StoreUnavailable(
                f"Cassandra at {self._settings.hosts}:{self._settings.port} (keyspace {self._settings.keyspace}, "
                f"PARLEY_CASSANDRA_HOSTS / PARLEY_KEYSPACE) failed: {type(exc).__name__}: {exc}"
            ) from exc

    async def load(self, conversation_id: str) -> Conversation:
        """The conversation as materialized so far (empty when it has no rows)."""
        cid = uuid.UUID(conversation_id)
        conv, msgs = await asyncio.gather(
            self._run("load.conversation", _CONVERSATION, (cid,)),
            self._run("load.messages", _MESSAGES, (cid,)),
        )
        return state_from_rows(conversation_id, conv[0] if conv else None, msgs)

    async def reply(self, conversation_id: str, message_id: str) -> StoredReply | None:
        """A reply's text as stored (for checkpoints resuming after a restart); None when it has no row."""
        rows = await self._run("load.reply", _REPLY, (uuid.UUID(conversation_id), uuid.UUID(message_id)))
        if not rows:
            return None
        r = rows[0]
        return StoredReply(content=r.content or "", tokens=r.tokens or 0, status=r.status or "")

    async def write(self, writes: list[Write]) -> None:
        """Execute ``writes`` (concurrently: they commute, each carrying its own timestamp)."""
        await asyncio.gather(*(self._run(w.shape, cql(w.shape), w.values) for w in writes))

    async def write_memory(self, event: MemoryUpdated) -> None:
        """A user's memory snapshot replaces their rows (streams/memory.py)."""
        for statement in memory.writes_for(event):
            await self._run(statement.cql, statement.cql.replace("{ks}.", ""), statement.values)

    def close(self) -> None:
        if self._session is not None:
            self._session.cluster.shutdown()
            self._session = None


def _result(future: ResponseFuture) -> asyncio.Future[list[Any]]:
    loop = asyncio.get_running_loop()
    out: asyncio.Future[list[Any]] = loop.create_future()
    rows: list[Any] = []

    def settle(result: Any, exc: BaseException | None) -> None:
        if out.done():
            return
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(result)

    def on_rows(page: list[Any] | None) -> None:
        rows.extend(page or ())
        if future.has_more_pages:
            future.start_fetching_next_page()
        else:
            loop.call_soon_threadsafe(settle, rows, None)

    def on_error(exc: BaseException) -> None:
        loop.call_soon_threadsafe(settle, None, exc)

    future.add_callbacks(on_rows, on_error)
    return out


async def retrying(what: str, attempt_once: Callable[[], Awaitable[T]], max_pause_s: float) -> T:
    """Call ``attempt_once()`` until it stops raising StoreUnavailable, backing off up to ``max_pause_s``.

    The event in hand is not acknowledged meanwhile, so an outage delays the
    projection instead of losing from it.
    """
    pause = 0.2
    failures = 0
    while True:
        try:
            return await attempt_once()
        except StoreUnavailable as exc:
            failures += 1
            log.warning("%s failed (attempt %d), retrying in %.1fs: %s", what, failures, pause, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, max_pause_s)
