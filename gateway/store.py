"""The gateway's reads (and its few direct writes) against Cassandra, as awaitables.

Driver errors become ``StoreUnavailable`` (``parley.cassandra.AsyncCql``); the app answers 503 with a
clear message, and logs which settings point where.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from documents.status import PROCESSING, VISIBLE
from parley.cassandra import AsyncCql
from schemas import sealing
from schemas.sealing import cell_at, open_text
from schemas.events import ConversationEvent, DocumentEvent, DocumentUploaded, MemoryUpdated, ToolCall
from streams import document_status, memory, projection, tree
from streams.store import by_partition, tool_use

#: Rows read past a list's limit, so archived and deleted ones filtered out still leave a full page.
LIST_SLACK = 400

@dataclass(frozen=True)
class ConversationRow:
    """A ``conversations`` row as the gateway reads it (the fold's state is ``streams.tree.Conversation``)."""

    id: str
    user_id: str
    title: str
    model: str | None
    selected_leaf_id: str | None
    created_at: datetime | None
    archived: bool = False


@dataclass(frozen=True)
class MessageRow:
    """A ``messages`` row as the gateway reads it (the fold's node is ``streams.tree.Message``)."""

    id: str
    parent_id: str | None
    role: str
    content: str
    model: str | None
    status: str | None
    finish_reason: str | None
    tokens: int | None
    attempt: int | None
    stream_offset: int | None
    created_at: datetime | None
    prompt_tokens: int | None = None  # the reply's prompt as the engine counted it
    cached_tokens: int | None = None  # of which served from its prefix cache
    document_ids: tuple[str, ...] = ()  # a user message's documents
    citations: dict[str, Any] | None = None  # a reply's {"status", "items"} (streams/projection.py citations_json)
    retrieval: dict[str, Any] | None = None  # a reply's {"path", "note", "documents", "latency_ms"}
    moderation: dict[str, Any] | None = None  # a flag's {"direction", "stage", "action", "categories"}
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls of the client's functions
    tool_call_id: str = ""  # a tool message's call
    feedback: dict[str, str] | None = None  # a reply's rating by its owner: {"rating": up|down, "reason"}

    def documents_json(self) -> dict[str, Any]:
        """The document fields of the message as the API shows them (none for a turn without documents)."""
        out: dict[str, Any] = {}
        if self.document_ids:
            out["document_ids"] = list(self.document_ids)
        if self.citations is not None:
            out["citations"] = self.citations.get("items", [])
            out["citation_status"] = self.citations.get("status", "")
        if self.retrieval is not None:
            out["retrieval"] = self.retrieval
        return out

    def tools_json(self) -> dict[str, Any]:
        """The tool fields of the message as the API shows them, OpenAI's way (none for a message without)."""
        out: dict[str, Any] = {}
        if self.tool_calls:
            out["tool_calls"] = tool_calls_json(self.tool_calls)
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


def tool_calls_json(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Tool calls as OpenAI writes them (``message.tool_calls``), as every API of Parley shows them."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class DocumentRow:
    id: str
    user_id: str
    conversation_id: str | None
    filename: str
    media_type: str
    size_bytes: int
    status: str  # processing | ready | failed
    pages_ready: int
    pages_total: int
    ocr_pages: int
    chunks: int
    error_code: str | None
    error_message: str | None
    storage_uri: str
    created_at: datetime | None

    @classmethod
    def uploaded(cls, event: DocumentUploaded) -> DocumentRow:
        """The row an upload writes (streams/document_status.py), without reading it back."""
        created = projection.to_time(event.occurred_at).replace(tzinfo=None, microsecond=event.occurred_at // 1000 % 1000 * 1000)
        return cls(
            event.document_id, event.user_id, event.conversation_id, event.filename, event.media_type, event.size_bytes,
            PROCESSING, 0, 0, 0, 0, None, None, event.storage_uri, created,
        )  # fmt: skip

    def public(self) -> dict[str, Any]:
        """What the API shows of it (GET /v1/documents/{id})."""
        out: dict[str, Any] = {
            "id": self.id,
            "object": "document",
            "filename": self.filename,
            "media_type": self.media_type,
            "size_bytes": self.size_bytes,
            "status": self.status,
            "pages_ready": self.pages_ready,
            "pages_total": self.pages_total,
            "ocr_pages": self.ocr_pages,
            "chunks": self.chunks,
            "conversation_id": self.conversation_id,
            "created_at": _iso(self.created_at),
        }
        if self.status == "failed":
            out["error"] = {"code": self.error_code or "failed", "message": self.error_message or ""}
        return out


_DOCUMENT_COLUMNS = (
    "document_id, user_id, conversation_id, filename, media_type, size_bytes, status, pages_ready, pages_total, "
    "ocr_pages, chunks, error_code, error_message, storage_uri, created_at"
)


def _document(r: Any) -> DocumentRow:
    return DocumentRow(
        str(r.document_id), r.user_id, _str(r.conversation_id), open_text(r.filename, at=cell_at("documents", "filename", r.document_id)) or "", r.media_type or "", r.size_bytes or 0,
        r.status, r.pages_ready or 0, r.pages_total or 0, r.ocr_pages or 0, r.chunks or 0, r.error_code,
        r.error_message, r.storage_uri or "", r.created_at,
    )  # fmt: skip


@dataclass(frozen=True)
class ShareRow:
    """A share link's row (``shares``, or the owner's list ``shares_by_conversation`` with the secret opened)."""

    id: str
    conversation_id: str
    user_id: str
    leaf_id: str
    created_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    secret: str = ""

    def live(self, now: datetime) -> bool:
        expires = self.expires_at.replace(tzinfo=timezone.utc) if self.expires_at else None
        return self.revoked_at is None and (expires is None or expires > now)


class Store:
    """The gateway's statements on its session (``parley.cassandra.AsyncCql``: prepared, every page)."""

    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    async def _run(self, cql: str, params: tuple = ()) -> list[Any]:
        """Run ``cql`` (tables written ``{ks}.name``) as a prepared statement."""
        return await self._cql.run(cql, params)

    # ---------------------------------------------------- conversations

    async def write_through(self, event: ConversationEvent, state: tree.Conversation | None = None) -> None:
        """Write the rows ``event`` projects to, exactly as the materializer will (same values and
        timestamps, so the two writes are one), for what a client must read back at once. ``state``:
        what is known of the conversation (its creation keys the owner's list).

        A write-through an outage cuts short must not look done: the materializer, loading a
        conversation, takes an event whose rows it finds in the conversation's own partition
        (``conversations``, ``messages``) as written, and skips it. So that partition goes last, as one
        batch (one partition: one mutation, all or nothing), after the other partitions' writes (the
        owner's list)."""
        writes = projection.writes_for(state or tree.empty(event.conversation_id), event, sealing.sealer())
        own = ("conversation_id", projection.to_uuid(event.conversation_id))
        for group in sorted(by_partition(writes), key=lambda g: g[0].partition == own):
            statements = [(projection.cql(w.shape).replace("UPDATE ", "UPDATE {ks}.", 1), w.values) for w in group]
            if len(statements) == 1:
                await self._run(*statements[0])
            else:
                await self._cql.run_batch(statements)

    async def write_document(self, event: DocumentEvent) -> None:
        """The ``documents`` rows ``event`` projects to, as the materializer writes them (streams/document_status.py)."""
        for statement in document_status.statements_for(event, sealing.sealer()):
            await self._run(statement.cql, statement.values)

    async def document(self, user_id: str, document_id: str) -> DocumentRow | None:
        """The user's document; None for another user's, a deleted one, or an id that is none."""
        did = _uuid(document_id)
        if did is None:
            return None
        rows = await self._run(
            f"SELECT {_DOCUMENT_COLUMNS} FROM {{ks}}.documents WHERE user_id = ? AND document_id = ?", (user_id, did)
        )
        return _document(rows[0]) if rows and rows[0].status in VISIBLE else None

    async def documents_of(self, user_id: str) -> list[DocumentRow]:
        rows = await self._run(f"SELECT {_DOCUMENT_COLUMNS} FROM {{ks}}.documents WHERE user_id = ?", (user_id,))
        found = [_document(r) for r in rows if r.status in VISIBLE]
        return sorted(found, key=lambda d: (d.created_at or datetime.min, d.id), reverse=True)

    async def conversation_documents(self, conversation_id: str) -> list[str]:
        """Ids of the documents attached to a conversation (uploaded with its id), oldest id first."""
        rows = await self._run(
            "SELECT document_id FROM {ks}.documents_by_conversation WHERE conversation_id = ?", (uuid.UUID(conversation_id),)
        )
        return [str(r.document_id) for r in rows]

    async def write_memory(self, event: MemoryUpdated) -> None:
        for statement in memory.writes_for(event, sealing.sealer()):
            await self._run(statement.cql, statement.values)

    async def memory(self, user_id: str) -> list[dict[str, str]]:
        rows = await self._run("SELECT fact_id, text FROM {ks}.user_memory WHERE user_id = ?", (user_id,))
        return [{"id": str(r.fact_id), "text": open_text(r.text, at=cell_at("user_memory", "text", r.fact_id))} for r in rows]

    async def conversation(self, conversation_id: str) -> ConversationRow | None:
        cid = _uuid(conversation_id)
        if cid is None:
            return None
        rows = await self._run(
            "SELECT conversation_id, user_id, title, model, selected_leaf_id, created_at, archived, deleted_at "
            "FROM {ks}.conversations WHERE conversation_id = ?",
            (cid,),
        )
        if not rows or rows[0].user_id is None or rows[0].deleted_at is not None:  # deleted: gone from every read
            return None
        r = rows[0]
        title = open_text(r.title, at=cell_at("conversations", "title", r.conversation_id)) or ""
        return ConversationRow(
            str(r.conversation_id), r.user_id, title, r.model, _str(r.selected_leaf_id), r.created_at, bool(r.archived)
        )

    async def deleted(self, conversation_id: str) -> bool:
        """Whether the conversation existed and was deleted (``conversation`` answers None for both)."""
        cid = _uuid(conversation_id)
        if cid is None:
            return False
        rows = await self._run("SELECT deleted_at FROM {ks}.conversations WHERE conversation_id = ?", (cid,))
        return bool(rows) and rows[0].deleted_at is not None

    async def conversations_of(self, user_id: str, limit: int = 100, *, archived: bool = False) -> list[dict[str, Any]]:
        """The user's conversations, newest first: the archived ones, or the others; never the deleted."""
        rows = await self._run(
            "SELECT conversation_id, title, created_at, archived, deleted FROM {ks}.conversations_by_user "
            "WHERE user_id = ? LIMIT ?",
            (user_id, limit + LIST_SLACK),
        )
        shown = [r for r in rows if not r.deleted and bool(r.archived) == archived][:limit]
        return [
            {
                "id": str(r.conversation_id),
                "title": open_text(r.title, at=cell_at("conversations_by_user", "title", r.conversation_id)) or "",
                "created_at": _iso(r.created_at),
                "archived": archived,
            }
            for r in shown
        ]

    async def conversation_ids_of(self, user_id: str) -> list[str]:
        """Every conversation of the user not yet deleted, archived ones too (an erasure deletes them all)."""
        rows = await self._run("SELECT conversation_id, deleted FROM {ks}.conversations_by_user WHERE user_id = ?", (user_id,))
        return [str(r.conversation_id) for r in rows if not r.deleted]

    _MESSAGE_COLUMNS = (
        "message_id, parent_id, role, content, model, status, finish_reason, tokens, attempt, stream_offset, created_at, "
        "prompt_tokens, cached_tokens, document_ids, citations, retrieval, moderation, tool_use, feedback, feedback_reason"
    )

    async def messages(self, conversation_id: str) -> list[MessageRow]:
        """Every message of the conversation, oldest first."""
        cid = _uuid(conversation_id)
        if cid is None:
            return []
        rows = await self._run(f"SELECT {self._MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE conversation_id = ?", (cid,))
        out = [_message(r) for r in rows if r.role is not None]  # a row only touched by a later update has no role yet
        return _in_order(out)

    _TREE_COLUMNS = "message_id, parent_id, role, model, status, finish_reason, tokens, attempt, stream_offset, created_at"

    async def tree(self, conversation_id: str) -> list[MessageRow]:
        """Every message's place in the tree and its state, oldest first, with no content read or opened
        (``content`` is empty): what posting a message needs, at a cost that does not grow with the text."""
        cid = _uuid(conversation_id)
        if cid is None:
            return []
        rows = await self._run(f"SELECT {self._TREE_COLUMNS} FROM {{ks}}.messages WHERE conversation_id = ?", (cid,))
        out = [
            MessageRow(
                str(r.message_id), _str(r.parent_id), r.role, "", r.model, r.status, r.finish_reason, r.tokens, r.attempt,
                r.stream_offset, r.created_at,
            )
            for r in rows
            if r.role is not None
        ]
        return _in_order(out)

    async def reply_statuses(self, conversation_id: str) -> dict[str, str | None]:
        """Reply id → its status, for every assistant message of the conversation: no content read or opened
        (a delete asks this to cancel the replies still being written)."""
        cid = _uuid(conversation_id)
        if cid is None:
            return {}
        rows = await self._run("SELECT message_id, role, status FROM {ks}.messages WHERE conversation_id = ?", (cid,))
        return {str(r.message_id): r.status for r in rows if r.role == "assistant"}

    async def find_message(self, message_id: str) -> tuple[str, MessageRow] | None:
        """(conversation id, message) of a message known only by its id."""
        mid = _uuid(message_id)
        if mid is None:
            return None
        rows = await self._run(
            f"SELECT conversation_id, {self._MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE message_id = ?", (mid,)
        )
        if not rows or rows[0].role is None:
            return None
        return str(rows[0].conversation_id), _message(rows[0])

    async def touch_reader(self, request_id: str, at: datetime) -> None:
        await self._run("UPDATE {ks}.reply_readers SET reader_at = ? WHERE request_id = ?", (at, uuid.UUID(request_id)))

    async def last_reader(self, request_id: str) -> datetime | None:
        rows = await self._run("SELECT reader_at FROM {ks}.reply_readers WHERE request_id = ?", (uuid.UUID(request_id),))
        return rows[0].reader_at.replace(tzinfo=timezone.utc) if rows and rows[0].reader_at else None

    async def message_when(
        self, conversation_id: str, message_id: str, ready: Callable[[MessageRow | None], bool], wait_s: float
    ) -> MessageRow | None:
        """The message's row once ``ready`` holds of it (or of its absence), else as it is after ``wait_s``:
        read again at pauses from 50 ms doubling to 0.5 s. Unavailable when Cassandra is down."""
        deadline, pause = time.monotonic() + wait_s, 0.05
        while True:
            found = await self.message(conversation_id, message_id)
            if ready(found) or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def share(self, share_id: str) -> ShareRow | None:
        """The share of that key (the SHA-256 of its link's secret), revoked or expired ones too."""
        rows = await self._run(
            "SELECT share_id, conversation_id, user_id, leaf_id, created_at, expires_at, revoked_at FROM {ks}.shares WHERE share_id = ?",
            (share_id,),
        )
        if not rows or rows[0].conversation_id is None or rows[0].leaf_id is None:  # a revocation alone: no share
            return None
        r = rows[0]
        return ShareRow(r.share_id, str(r.conversation_id), r.user_id, str(r.leaf_id), r.created_at, r.expires_at, r.revoked_at)

    async def shares_of(self, conversation: ConversationRow) -> list[ShareRow]:
        """The conversation's shares, oldest first, each with its secret opened (for its owner)."""
        rows = await self._run(
            "SELECT share_id, secret, leaf_id, created_at, expires_at, revoked_at FROM {ks}.shares_by_conversation "
            "WHERE conversation_id = ?",
            (_uuid(conversation.id),),
        )
        out = [
            ShareRow(
                r.share_id, conversation.id, conversation.user_id, str(r.leaf_id), r.created_at, r.expires_at, r.revoked_at,
                open_text(r.secret, at=cell_at("shares_by_conversation", "secret", r.share_id)) or "",
            )
            for r in rows
            if r.leaf_id is not None
        ]  # fmt: skip
        return sorted(out, key=lambda r: r.created_at or datetime.min)

    async def message(self, conversation_id: str, message_id: str) -> MessageRow | None:
        cid, mid = _uuid(conversation_id), _uuid(message_id)
        if cid is None or mid is None:
            return None
        rows = await self._run(
            f"SELECT {self._MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE conversation_id = ? AND message_id = ?", (cid, mid)
        )
        return _message(rows[0]) if rows and rows[0].role is not None else None


def _in_order(messages: list[MessageRow]) -> list[MessageRow]:
    """Oldest first; a reply and its question share a millisecond, so depth breaks the tie. Each depth is
    counted once (a long conversation is one long branch: walking it from every message was quadratic)."""
    parents = {m.id: m.parent_id for m in messages}
    depths: dict[str, int] = {}

    def depth(mid: str) -> int:
        path: list[str] = []
        at: str | None = mid
        while at is not None and at in parents and at not in depths and len(path) <= len(parents):
            path.append(at)
            at = parents[at]
        d = depths.get(at, -1) if at is not None else -1  # a root's parent (None, or not in the list): -1
        for walked in reversed(path):
            d += 1
            depths[walked] = d
        return depths.get(mid, d)

    return sorted(messages, key=lambda m: (m.created_at or datetime.min, depth(m.id), m.id))


def _message(r: Any) -> MessageRow:
    def opened(column: str) -> str | None:
        return open_text(getattr(r, column), at=cell_at("messages", column, r.message_id))

    return MessageRow(
        str(r.message_id),
        _str(r.parent_id),
        r.role,
        opened("content") or "",
        r.model,
        r.status,
        r.finish_reason,
        r.tokens,
        r.attempt,
        r.stream_offset,
        r.created_at,
        r.prompt_tokens,
        r.cached_tokens,
        tuple(r.document_ids or ()),
        _json(opened("citations")),
        _json(opened("retrieval")),
        _json(r.moderation),
        *tool_use(opened("tool_use")),
        {"rating": r.feedback, "reason": opened("feedback_reason") or ""} if r.feedback else None,
    )


def _json(value: str | None) -> dict[str, Any] | None:
    return json.loads(value) if value else None


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat() + "Z"
