"""The Cassandra projection of ``chat.events``: event → the writes it makes.

Pure: ``writes_for(state, event, sealer)`` takes the conversation as the log
had it before the event (``streams.tree``) and returns plain ``Write`` values;
the materializer executes them. Content cells are sealed here, with the
``sealing.Sealer`` the caller hands in (its shell's key service), so that every
writer of these rows (the materializer, the gateway's write-through, a rebuild)
seals the same cells the same way; the shell fetches the owner's key before it
calls (``codec.decode_async`` does), so sealing finds it held and waits on nothing. Every write carries the event's ``occurred_at``
as its Cassandra timestamp, and every value derives from the event (never from
the clock), so replaying the log in any amount yields the same cells: a cell
written twice gets the same value at the same timestamp, and a later event's
write wins over an earlier one whatever order they are replayed in.

The state is needed for what the event alone cannot say: a repeated
MessagePosted / GenerationRequested / ConversationCreated (a retried POST) is
not a newer write that would move ``created_at`` or turn a finished reply back
into ``streaming`` (a repeat with a time of its own restates the message as the
log has it: ``_restated``); and a rename must find the conversation's
``created_at``, part of ``conversations_by_user``'s key.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from schemas import events as ev
from schemas import sealing
from schemas.endings import FILTERED_NOTICE
from streams.tree import STATUS_BY_FINISH, STREAMING, Conversation

#: A moderation verdict's writes to a reply are timestamped this far after the verdict, so they outrank
#: the reply's own completion and checkpoints whichever order the log has them in: a worker still
#: finishing a reply when the verdict came ends it within seconds (µs; derived from the event, so
#: replays agree).
VERDICT_PRECEDENCE_US = 10 * 60 * 1_000_000

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Write:
    """``UPDATE <table> USING TIMESTAMP <timestamp> SET <cells> WHERE <key>``.

    UPDATE (an upsert) rather than INSERT so an event sets only the cells it
    knows; a later event fills in the rest of the row.
    """

    table: str
    key: tuple[tuple[str, Any], ...]  # primary key columns and values
    cells: tuple[tuple[str, Any], ...]  # other columns; None values are left out
    timestamp: int  # µs: the event's occurred_at

    @property
    def shape(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """Table and column names: one prepared statement per shape."""
        return self.table, tuple(k for k, _ in self.key), tuple(c for c, _ in self.cells)

    @property
    def partition(self) -> tuple[str, Any]:
        """The partition key (column, value): the first key column in every projected table. Writes of
        one conversation to ``conversations``, ``messages`` and ``summaries`` share it, and Cassandra
        applies them as one mutation when they come in one batch."""
        return self.key[0]

    @property
    def values(self) -> tuple[Any, ...]:
        """Bind values in the order of ``cql(shape)``."""
        return (self.timestamp, *(v for _, v in self.cells), *(v for _, v in self.key))


def cql(shape: tuple[str, tuple[str, ...], tuple[str, ...]]) -> str:
    table, key, cells = shape
    sets = ", ".join(f"{c} = ?" for c in cells)
    where = " AND ".join(f"{k} = ?" for k in key)
    return f"UPDATE {table} USING TIMESTAMP ? SET {sets} WHERE {where}"


def _write(table: str, key: dict[str, Any], cells: dict[str, Any], timestamp: int) -> Write:
    return Write(table, tuple(key.items()), tuple((c, v) for c, v in cells.items() if v is not None), timestamp)


def to_uuid(value: str | None) -> uuid.UUID | None:
    """An id of the log as a ``uuid`` column value; a malformed id raises ValueError (→ DLQ)."""
    return None if value is None else uuid.UUID(value)


def to_time(us: int) -> datetime:
    """µs since the epoch as a ``timestamp`` value (exact integer arithmetic: replays agree)."""
    return EPOCH + timedelta(microseconds=us)


def from_time(value: datetime | None) -> int | None:
    """A ``timestamp`` value read back as µs since the epoch (the driver hands back naive UTC datetimes)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# ---------------------------------------------------------------- per event


def _conversation(e: ev.ConversationEvent, **cells: Any) -> Write:
    cells["updated_at"] = to_time(e.occurred_at)
    return _write("conversations", {"conversation_id": to_uuid(e.conversation_id)}, cells, e.occurred_at)


def _message(e: ev.ConversationEvent, message_id: str, **cells: Any) -> Write:
    cells["updated_at"] = to_time(e.occurred_at)
    key = {"conversation_id": to_uuid(e.conversation_id), "message_id": to_uuid(message_id)}
    return _write("messages", key, cells, e.occurred_at)


def _created(s: Conversation, e: ev.ConversationCreated) -> list[Write]:
    if s.created_at is not None:  # a repeat would add a second conversations_by_user row
        return []
    created = to_time(e.occurred_at)
    by_user_key = {"user_id": e.user_id, "created_at": created, "conversation_id": to_uuid(e.conversation_id)}
    return [
        _conversation(e, user_id=e.user_id, title=e.title, model=e.model, created_at=created),
        _write("conversations_by_user", by_user_key, {"title": e.title}, e.occurred_at),
    ]


def _restated(s: Conversation, e: ev.MessagePosted | ev.GenerationRequested, message_id: str) -> list[Write]:
    """A creation event repeated with a time of its own: a POST retried after its first append was in
    doubt (the broker paused, the gateway killed), appended again by a gateway that could not see the
    first (Cassandra behind). The log keeps the first; but that gateway wrote the repeat through as a new
    message (a later created_at, a finished reply back to ``streaming``, a later stream offset). So the
    message is restated as the log has it, just after the repeat: every cell such a write-through sets
    but the content (the materializer's state may not hold texts; a retry sends the same). A redelivered
    event (the same time) restates nothing."""
    known = s.messages[message_id]
    # The same event again (a redelivery, a replay): a state loaded from the rows knows its time to the
    # millisecond only (``timestamp`` cells), so compare there. A retried POST comes seconds later.
    if known.created_at is None or known.created_at // 1000 == e.occurred_at // 1000:
        return []
    at = e.occurred_at + 1
    cells = {
        "parent_id": to_uuid(known.parent_id),
        "role": known.role,
        "status": known.status,
        "client_message_id": e.client_message_id,
        "created_at": to_time(known.created_at),
        "updated_at": to_time(e.occurred_at),
    }
    if isinstance(e, ev.GenerationRequested):
        cells["stream_offset"] = known.stream_offset
    else:
        cells["document_ids"] = list(known.document_ids) or None
    key = {"conversation_id": to_uuid(e.conversation_id), "message_id": to_uuid(message_id)}
    # The conversation's cells as the write-through set them, at its own time: the same cells, so nothing
    # can tie. Not restated after it: a POST's two events are a microsecond apart, and a restated leaf
    # tied with the next event's (found by bench.chaos --replicas 3). The leaf the repeat wrote is the
    # one its first occurrence set, unless the user moved it in between (not restated: a known gap).
    conversation = {"updated_at": to_time(e.occurred_at)}
    return [
        _write("messages", key, cells, at),
        _write("conversations", {"conversation_id": to_uuid(e.conversation_id)}, conversation, e.occurred_at),
    ]


def _posted(s: Conversation, e: ev.MessagePosted) -> list[Write]:
    if e.message_id in s.messages:
        return _restated(s, e, e.message_id)
    return [
        _message(
            e,
            e.message_id,
            parent_id=to_uuid(e.parent_id),
            role=e.role,
            content=e.content,
            model=e.model,
            status="complete",
            client_message_id=e.client_message_id,
            document_ids=list(e.document_ids) or None,
            created_at=to_time(e.occurred_at),
            tool_use=tool_use_json(e.tool_calls, e.tool_call_id),
        ),
        _conversation(e, user_id=e.user_id, selected_leaf_id=to_uuid(e.message_id)),
    ]


def _requested(s: Conversation, e: ev.GenerationRequested) -> list[Write]:
    known = s.messages.get(e.request_id)
    if known is not None and known.created_at is not None:
        return _restated(s, e, e.request_id)
    return [
        _message(
            e,
            e.request_id,
            parent_id=to_uuid(e.parent_id),
            role="assistant",
            # Its completion came first (only out-of-order input does that): keep its status.
            status=STREAMING if known is None else None,
            client_message_id=e.client_message_id,
            stream_offset=e.token_offset,
            created_at=to_time(e.occurred_at),
        ),
        _conversation(e, selected_leaf_id=to_uuid(e.request_id)),
    ]


def _completed(s: Conversation, e: ev.GenerationCompleted) -> list[Write]:
    finish = "content_filter" if e.request_id in s.moderated else e.finish_reason
    return [
        _message(
            e,
            e.request_id,
            parent_id=to_uuid(e.parent_id),
            role="assistant",
            content=FILTERED_NOTICE if finish == "content_filter" else e.content,
            status=STATUS_BY_FINISH[finish],
            finish_reason=finish,
            prompt_tokens=e.usage.prompt_tokens,
            cached_tokens=e.usage.cached_tokens,
            tokens=e.usage.completion_tokens,
            model=e.model or None,
            pool=e.pool or None,
            replica=e.replica or None,
            attempt=e.attempt,
            error_code=e.error_code,
            citations=citations_json(e),
            retrieval=retrieval_json(e.retrieval),
            tool_use=None if finish == "content_filter" else tool_use_json(e.tool_calls),
        ),
        _conversation(e),
    ]


def _moderated(s: Conversation, e: ev.GenerationModerated) -> list[Write]:
    """The reply becomes the notice (outranking its own writes: ``VERDICT_PRECEDENCE_US``); a flagged
    input is marked on the user's message too, whose text stays: it is the user's own."""
    verdict = moderation_json(e)
    reply = _write(
        "messages",
        {"conversation_id": to_uuid(e.conversation_id), "message_id": to_uuid(e.request_id)},
        {
            "parent_id": to_uuid(e.parent_id) if e.parent_id else None,  # '': a turn recovered without its parent
            "role": "assistant",
            "content": FILTERED_NOTICE,
            "status": STATUS_BY_FINISH["content_filter"],
            "finish_reason": "content_filter",
            "moderation": verdict,
            "tool_use": "",  # the notice calls nothing
            "updated_at": to_time(e.occurred_at),
        },
        e.occurred_at + VERDICT_PRECEDENCE_US,
    )
    writes = [reply]
    if e.direction == "input" and e.parent_id:
        writes.append(_message(e, e.parent_id, moderation=verdict))
    return writes


def moderation_json(e: ev.GenerationModerated) -> str:
    """``messages.moderation``: what was flagged, where and what was done (never the text)."""
    return json.dumps(
        {"direction": e.direction, "stage": e.stage, "action": e.action, "categories": list(e.categories)}, sort_keys=True
    )


def tool_use_json(calls: Sequence[ev.ToolCall], call_id: str = "") -> str | None:
    """``messages.tool_use``: a message's calls of the client's functions, or the call a tool message answers
    (null: neither)."""
    if calls:
        return json.dumps({"calls": [asdict(c) for c in calls]}, sort_keys=True)
    return json.dumps({"call_id": call_id}) if call_id else None


def citations_json(e: ev.GenerationCompleted) -> str | None:
    """``messages.citations``: the reply's citations and whether it cited anything (null: no documents)."""
    if not e.citation_status:
        return None
    return json.dumps({"status": e.citation_status, "items": [asdict(c) for c in e.citations]}, sort_keys=True)


def retrieval_json(r: ev.Retrieval | None) -> str | None:
    """``messages.retrieval``: which search answered and how much of each document it saw."""
    if r is None:
        return None
    return json.dumps(
        {
            "path": r.path,
            "note": r.note,
            "documents": [asdict(d) for d in r.documents],
            "latency_ms": r.latency_ms,
            **({"injections": [asdict(i) for i in r.injections]} if r.injections else {}),
        },
        sort_keys=True,
    )


def _leaf(s: Conversation, e: ev.LeafSelected) -> list[Write]:
    return [_conversation(e, selected_leaf_id=to_uuid(e.leaf_id))]


def _renamed(s: Conversation, e: ev.ConversationRenamed) -> list[Write]:
    if e.by != "user" and s.titled_by_user:
        return []  # an automatic title never overwrites the user's
    return [_conversation(e, title=e.title), *_by_user(s, e, title=e.title)]


def _by_user(s: Conversation, e: ev.ConversationEvent, **cells: Any) -> list[Write]:
    """An update of the conversation's row in its owner's list (none while its creation is unknown: an UPDATE
    without the real ``created_at`` would invent a row)."""
    if s.created_at is None:
        return []
    key = {"user_id": s.user_id or e.user_id, "created_at": to_time(s.created_at), "conversation_id": to_uuid(e.conversation_id)}
    return [_write("conversations_by_user", key, cells, e.occurred_at)]


def _archived(s: Conversation, e: ev.ConversationArchived) -> list[Write]:
    return [_conversation(e, archived=e.archived), *_by_user(s, e, archived=e.archived)]


def _deleted(s: Conversation, e: ev.ConversationDeleted) -> list[Write]:
    """A mark every read path honours, and the content gone from the rows: the title and every message's
    text, citations and retrieval are blanked (the rows' ids stay, so a late event finds the mark). The
    log keeps the text, sealed, until its owner is erased (DESIGN.md §12)."""
    purged = [_message(e, mid, content="", citations="", retrieval="", tool_use="", feedback_reason="") for mid in sorted(s.messages)]
    return [_conversation(e, deleted_at=to_time(e.occurred_at), title=""), *_by_user(s, e, deleted=True, title=""), *purged]


def _feedback(s: Conversation, e: ev.FeedbackGiven) -> list[Write]:
    """The rating on the reply's row ("" when taken back: an empty cell, not a null the write would leave
    out), at the event's time: the last one stands. A message the log does not know as a reply of this
    conversation gets none (the gateway checks it first)."""
    reply = s.messages.get(e.message_id)
    if reply is None or reply.role != "assistant":
        return []
    key = {"conversation_id": to_uuid(e.conversation_id), "message_id": to_uuid(e.message_id)}
    return [_write("messages", key, {"feedback": e.rating, "feedback_reason": e.reason}, e.occurred_at)]


def _shared(s: Conversation, e: ev.ConversationShared) -> list[Write]:
    """The link's row by its key (what a visitor's read finds) and its entry in the owner's list (with the
    secret, sealed). A share of a branch the log does not know writes nothing (the gateway checks it first)."""
    if e.leaf_id not in s.messages:
        return []
    cells = {
        "leaf_id": to_uuid(e.leaf_id),
        "created_at": to_time(e.occurred_at),
        "expires_at": to_time(e.expires_at) if e.expires_at else None,
    }
    return [
        _write("shares", {"share_id": e.share_id}, {"conversation_id": to_uuid(e.conversation_id), "user_id": e.user_id, **cells}, e.occurred_at),
        _write("shares_by_conversation", _share_key(e), {"secret": e.secret, **cells}, e.occurred_at),
    ]


def _revoked(s: Conversation, e: ev.ShareRevoked) -> list[Write]:
    revoked = {"revoked_at": to_time(e.occurred_at)}
    return [
        _write("shares", {"share_id": e.share_id}, revoked, e.occurred_at),
        _write("shares_by_conversation", _share_key(e), {**revoked, "secret": ""}, e.occurred_at),
    ]


def _share_key(e: ev.ConversationShared | ev.ShareRevoked) -> dict[str, Any]:
    return {"conversation_id": to_uuid(e.conversation_id), "share_id": e.share_id}


def _summary(s: Conversation, e: ev.SummaryWritten) -> list[Write]:
    key = {"conversation_id": to_uuid(e.conversation_id), "summary_id": e.summary_id}
    cells = {
        "through_message_id": to_uuid(e.through_message_id),
        # Frozen: the old non-frozen covered_message_ids grew on every rewrite (schemas/cql/0008).
        "covered_ids": [to_uuid(m) for m in e.covered_message_ids],
        "content": e.content,
        "tokens": e.tokens,
        "model": e.model,
        "created_at": to_time(e.occurred_at),
    }
    return [_write("summaries", key, cells, e.occurred_at)]


#: Every chat.events type the materializer writes, and how.
PROJECTION: dict[type[ev.Event], Callable[[Conversation, Any], list[Write]]] = {
    ev.ConversationCreated: _created,
    ev.MessagePosted: _posted,
    ev.GenerationRequested: _requested,
    ev.GenerationCompleted: _completed,
    ev.LeafSelected: _leaf,
    ev.ConversationRenamed: _renamed,
    ev.ConversationArchived: _archived,
    ev.ConversationDeleted: _deleted,
    ev.FeedbackGiven: _feedback,
    ev.ConversationShared: _shared,
    ev.ShareRevoked: _revoked,
    ev.SummaryWritten: _summary,
    ev.GenerationModerated: _moderated,
}


#: The cells of each table that hold a user's content: sealed under the owner's data key (DESIGN.md §12).
SEALED_CELLS = {
    "conversations": frozenset({"title"}),
    "conversations_by_user": frozenset({"title"}),
    "messages": frozenset({"content", "citations", "retrieval", "tool_use", "feedback_reason"}),
    "summaries": frozenset({"content"}),
    "shares_by_conversation": frozenset({"secret"}),
}
#: The key column that names a row of each table in its cells' place (``sealing.cell_at``): what every
#: reader of the row has at hand (never a time, which Cassandra hands back at another precision).
ROW_IDS = {
    "conversations": "conversation_id",
    "conversations_by_user": "conversation_id",
    "messages": "message_id",
    "summaries": "summary_id",
    "shares_by_conversation": "share_id",
}


def sealed(write: Write, user_id: str, sealer: sealing.Sealer) -> Write:
    """``write`` with its content cells sealed for ``user_id``, each bound to its cell and row
    (deterministically: a replay, a rebuild and the gateway's write-through write the same cells)."""
    columns = SEALED_CELLS.get(write.table)
    if not columns or sealer.keys is None:
        return write
    row = dict(write.key)[ROW_IDS[write.table]]
    cells = tuple(
        (c, sealer.seal(user_id, v, at=sealing.cell_at(write.table, c, row), deterministic=True) if c in columns else v) for c, v in write.cells
    )
    return Write(write.table, write.key, cells, write.timestamp)


def writes_for(state: Conversation, event: ev.Event, sealer: sealing.Sealer) -> list[Write]:
    """The writes ``event`` makes, given the conversation before it, content sealed with ``sealer``; []
    for other event types."""
    step = PROJECTION.get(type(event))
    if step is None:
        return []
    if state.deleted:
        # A deleted conversation's late events write nothing, but for a reply that was in flight: the
        # checkpoints of its chunks (timestamped after the deletion) put text back in its row, and its
        # completion, later than every chunk, blanks it again.
        if isinstance(event, ev.GenerationCompleted):
            return [sealed(_message(event, event.request_id, content="", citations="", retrieval="", tool_use=""), event.user_id, sealer)]
        return []
    return [sealed(w, event.user_id, sealer) for w in step(state, event)]
