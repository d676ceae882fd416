"""The processors' Cassandra edge: load a conversation's tree, execute writes.

The driver answers on its own thread; ``_run`` turns its futures into asyncio
ones, so a query never blocks the faust event loop (a blocked loop misses
Kafka heartbeats and loses its partitions). Driver errors become
``StoreUnavailable`` here; what to do about them (retry, wait) is the
caller's decision.
"""

from __future__ import annotations

import asyncio
import json
import datetime as _dt
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from cassandra.cluster import Session

from documents.status import VISIBLE
from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings
from schemas.events import DocumentEvent, MemoryUpdated, ToolCall
from schemas import sealing
from schemas.sealing import cell_at, open_text
from streams import document_status, memory
from streams.checkpoint import StoredReply
from streams.document_search import Status
from streams.projection import Write, cql, from_time
from streams.usage_fold import UsageRow
from streams.tree import FINAL_STATUSES, Conversation, Message, frozen_messages


_CONVERSATION = (
    "SELECT user_id, title, model, created_at, selected_leaf_id, deleted_at FROM conversations WHERE conversation_id = ?"
)
_MESSAGES = (
    "SELECT message_id, parent_id, role, content, status, finish_reason, created_at, document_ids, moderation, stream_offset, tool_use "
    "FROM messages WHERE conversation_id = ?"
)
#: The same rows without their text: what the projection needs (it never reads a message's content).
_MESSAGES_NO_TEXT = (
    "SELECT message_id, parent_id, role, status, finish_reason, created_at, document_ids, moderation, stream_offset "
    "FROM messages WHERE conversation_id = ?"
)
_REPLY = "SELECT content, tokens, status FROM messages WHERE conversation_id = ? AND message_id = ?"

#: The most statements one batch carries: a partition's writes beyond it go in further batches. A batch
#: of one partition is exempt from Cassandra's batch size thresholds, but a mutation must still fit
#: in half a commit log segment; replies are at most a few hundred KiB.
BATCH_MAX = 64


def by_partition(writes: Iterable[Write], most: int = BATCH_MAX) -> list[list[Write]]:
    """``writes`` grouped by partition key (``Write.partition``), in order, each group at most ``most`` long."""
    groups: dict[tuple[str, Any], list[list[Write]]] = {}
    for w in writes:
        chunks = groups.get(w.partition)
        if chunks is None:
            groups[w.partition] = [[w]]
        elif len(chunks[-1]) >= most:
            chunks.append([w])
        else:
            chunks[-1].append(w)
    return [chunk for chunks in groups.values() for chunk in chunks]





def _id(value: Any) -> str | None:
    return None if value is None else str(value)


def tool_use(cell: str | None) -> tuple[tuple[ToolCall, ...], str]:
    """A ``messages.tool_use`` cell (streams/projection.py tool_use_json) read back: (calls, call id)."""
    if not cell:
        return (), ""
    found = json.loads(cell)
    return tuple(ToolCall(**c) for c in found.get("calls", ())), str(found.get("call_id", ""))


def state_from_rows(conversation_id: str, conversation: Any | None, messages: Iterable[Any]) -> Conversation:
    """A tree state from the materialized rows (pure; rows are anything with the selected attributes).

    A reply that ended counts as answered. One still ``streaming`` does not
    count as requested: the rows cannot tell whether the context builder ever
    sent it on, and a generation sent twice (at-least-once) beats one lost.
    """
    msgs: dict[str, Message] = {}
    answered: set[str] = set()
    moderated: set[str] = set()
    for r in messages:
        if r.status is None:
            # Only a checkpoint wrote it (chat.tokens ran ahead of chat.events): the
            # log has not said what it is yet, and its GenerationRequested must not be
            # taken for a repeat when it comes.
            continue
        mid = str(r.message_id)
        text = getattr(r, "content", None)  # not selected by a load without text
        calls, call_id = tool_use(open_text(getattr(r, "tool_use", None), at=cell_at("messages", "tool_use", r.message_id)))
        content = open_text(text, at=cell_at("messages", "content", r.message_id)) or ""
        msgs[mid] = Message(
            mid, _id(r.parent_id), r.role or "", content, r.status or "", r.finish_reason, from_time(r.created_at),
            tuple(getattr(r, "document_ids", None) or ()), getattr(r, "stream_offset", None), calls, call_id,
        )
        if r.role == "assistant" and r.status in FINAL_STATUSES:
            answered.add(mid)
        if r.role == "assistant" and getattr(r, "moderation", None):
            moderated.add(mid)
    if conversation is None:
        return Conversation(
            conversation_id=conversation_id,
            messages=frozen_messages(msgs),
            answered=frozenset(answered),
            moderated=frozenset(moderated),
        )
    return Conversation(
        conversation_id=conversation_id,
        user_id=conversation.user_id or "",
        title=open_text(conversation.title, at=cell_at("conversations", "title", uuid.UUID(conversation_id))) or "",
        model=conversation.model,
        created_at=from_time(conversation.created_at),
        selected_leaf_id=_id(conversation.selected_leaf_id),
        messages=frozen_messages(msgs),
        answered=frozenset(answered),
        moderated=frozenset(moderated),
        titled_by_user=bool(conversation.title),  # a title of unknown origin is kept as if the user's
        deleted=getattr(conversation, "deleted_at", None) is not None,
    )


class Store:
    """One Cassandra session for a processor, opened on first use (``parley.cassandra.AsyncCql``).
    ``texts=False``: conversations load without their messages' text (the materializer's, whose
    projection never reads it: nothing is decrypted or held in the clear for it)."""

    def __init__(self, settings: CassandraSettings, *, texts: bool = True) -> None:
        self._cql = AsyncCql(settings)
        self._messages = _MESSAGES if texts else _MESSAGES_NO_TEXT

    async def session(self) -> Session:
        return await self._cql.session()

    async def run(self, text: str, values: tuple[Any, ...] = ()) -> list[Any]:
        """Every row of a prepared statement; StoreUnavailable naming the settings on failure."""
        return await self._cql.run(text, values)

    async def org_policies(self) -> dict[str, str]:
        """Every organisation's own moderation policy (JSON), by org: a small table, read whole."""
        return {r.org_id: r.policy for r in await self.run("SELECT org_id, policy FROM org_policies") if r.policy}

    async def load(self, conversation_id: str) -> Conversation:
        """The conversation as materialized so far (empty when it has no rows)."""
        cid = uuid.UUID(conversation_id)
        conv, msgs = await asyncio.gather(
            self.run(_CONVERSATION, (cid,)),
            self.run(self._messages, (cid,)),
        )
        return state_from_rows(conversation_id, conv[0] if conv else None, msgs)

    async def reply(self, conversation_id: str, message_id: str) -> StoredReply | None:
        """A reply's text as stored (for checkpoints resuming after a restart); None when it has no row."""
        rows = await self.run(_REPLY, (uuid.UUID(conversation_id), uuid.UUID(message_id)))
        if not rows:
            return None
        r = rows[0]
        content = open_text(r.content, at=cell_at("messages", "content", uuid.UUID(message_id)))
        return StoredReply(content=content or "", tokens=r.tokens or 0, status=r.status or "")

    async def write(self, writes: list[Write]) -> None:
        """Execute ``writes``: those of one partition as one unlogged batch, the partitions concurrently.

        Order does not matter, within a partition or across: every write carries its event's time as
        ``USING TIMESTAMP`` (streams/projection.py, streams/checkpoint.py), so Cassandra keeps the
        newest cell whatever order the writes land in. One batch per partition is one request and one
        mutation instead of one of each per write.
        """
        await asyncio.gather(*(self._write_one(group) for group in by_partition(writes)))

    async def _write_one(self, group: list[Write]) -> None:
        if len(group) == 1:
            await self.run(cql(group[0].shape), group[0].values)
        else:
            await self._cql.run_batch([(cql(w.shape), w.values) for w in group])

    async def write_memory(self, event: MemoryUpdated) -> None:
        """A user's memory snapshot replaces their rows (streams/memory.py): the partition delete and the
        facts, each timestamped, in one batch of the user's partition."""
        await self._cql.run_batch([(s.cql, s.values) for s in memory.writes_for(event, sealing.sealer())])

    async def write_document(self, event: DocumentEvent) -> None:
        """A document's status rows (streams/document_status.py): each statement timestamped, so they may
        land in any order."""
        await asyncio.gather(*(self.run(s.cql, s.values) for s in document_status.statements_for(event, sealing.sealer())))

    @property
    def cql(self) -> AsyncCql:
        """The session, for the document index (documents/index.py) that shares it."""
        return self._cql

    async def statuses(self, user_id: str, document_ids: Sequence[str]) -> dict[str, Status]:
        """The user's documents among ``document_ids`` (another user's are simply not found), by id."""
        rows = await asyncio.gather(
            *(
                self.run(
                    "SELECT document_id, filename, status, pages_ready, pages_total FROM documents "
                    "WHERE user_id = ? AND document_id = ?",
                    (user_id, uuid.UUID(d)),
                )
                for d in document_ids
            )
        )
        found = [r[0] for r in rows if r and r[0].status in VISIBLE]
        return {
            str(r.document_id): Status(
                str(r.document_id),
                open_text(r.filename, at=cell_at("documents", "filename", r.document_id)) or "",
                r.status,
                r.pages_ready or 0,
                r.pages_total or 0,
            )
            for r in found
        }

    async def document_ids(self, user_id: str) -> list[str]:
        """Ids of the user's documents that are not deleted (the tool ``search_documents`` searches them)."""
        rows = await self.run("SELECT document_id, status FROM documents WHERE user_id = ?", (user_id,))
        return [str(r.document_id) for r in rows if r.status in VISIBLE]

    def close(self) -> None:
        self._cql.close()


_INSERT_USAGE = (
    "INSERT INTO usage_by_request (user_id, day, model, request_id, attempt, conversation_id, pool, finish_reason, "
    "prompt_tokens, cached_tokens, completion_tokens, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "USING TIMESTAMP ?"
)


class UsageStore(Store):
    """The processors' Cassandra session, plus the one write the usage fold makes."""

    async def record(self, row: UsageRow) -> None:
        k = row.key
        recorded_at = _dt.datetime.fromtimestamp(row.occurred_at / 1_000_000, tz=_dt.timezone.utc)
        values = (
            k.user_id, k.day, k.model, k.request_id, k.attempt, row.conversation_id, row.pool, row.finish_reason,
            row.prompt_tokens, row.cached_tokens, row.completion_tokens, recorded_at, row.occurred_at,
        )  # fmt: skip
        await self.run(_INSERT_USAGE, values)
