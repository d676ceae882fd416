"""The conversation tree as a fold over ``chat.events``.

``apply(state, event) -> state`` is the whole model: the context builder folds
events into it to find a turn's branch, the materializer folds them to know
what a repeated event would overwrite. Every update is idempotent (applying an
event twice leaves the same state) and never moves a message backwards (a
late or repeated GenerationRequested does not turn a finished reply back into
a streaming one), so a state rebuilt from Cassandra can have the log's events
applied on top of it safely.

States are immutable: ``apply`` returns a new one and leaves its input alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from schemas import events as ev
from schemas.endings import FILTERED_NOTICE

#: Message status after a generation ended, by finish_reason (``messages.status``).
STATUS_BY_FINISH = {
    "stop": "complete",
    "length": "complete",
    "cancelled": "cancelled",
    "failed": "failed",
    "rejected": "rejected",
    "content_filter": "filtered",
}
STREAMING = "streaming"
COMPLETE = "complete"
FINAL_STATUSES = frozenset(STATUS_BY_FINISH.values())


@dataclass(frozen=True)
class Message:
    """One node of the tree (a user or assistant message)."""

    message_id: str
    parent_id: str | None
    role: str
    content: str = ""
    status: str = COMPLETE  # streaming | complete | cancelled | failed | rejected | filtered
    finish_reason: str | None = None
    #: µs of the event that created it; None when only its completion is known.
    created_at: int | None = None
    #: Documents a user message asks about (MessagePosted.document_ids).
    document_ids: tuple[str, ...] = ()
    #: Where a reply's chunks begin on chat.tokens (GenerationRequested.token_offset); None if unknown.
    stream_offset: int | None = None


def frozen_messages(d: dict[str, Message]) -> Mapping[str, Message]:
    return MappingProxyType(d)


@dataclass(frozen=True)
class Conversation:
    """What the log says about one conversation so far."""

    conversation_id: str
    user_id: str = ""
    title: str = ""
    model: str | None = None
    #: µs of ConversationCreated: part of conversations_by_user's key, so renames need it.
    created_at: int | None = None
    selected_leaf_id: str | None = None
    messages: Mapping[str, Message] = field(default_factory=lambda: frozen_messages({}))
    #: Generations asked for (GenerationRequested seen), by request id.
    requested: frozenset[str] = frozenset()
    #: Generations that ended (GenerationCompleted seen), by request id.
    answered: frozenset[str] = frozenset()
    #: The user named it (at creation or by a rename): an automatic title never overwrites theirs.
    titled_by_user: bool = False
    #: ConversationDeleted seen: nothing more is built or projected for it.
    deleted: bool = False
    #: Replies moderation flagged (GenerationModerated seen), by request id: whatever order their
    #: GenerationCompleted comes in, they read as the notice, never their text.
    moderated: frozenset[str] = frozenset()

    def seen_request(self, request_id: str) -> bool:
        return request_id in self.requested or request_id in self.answered

    def with_message(self, message: Message) -> Conversation:
        return replace(self, messages=frozen_messages({**self.messages, message.message_id: message}))


def empty(conversation_id: str) -> Conversation:
    return Conversation(conversation_id=conversation_id)


# ------------------------------------------------------------------ the fold


def _created(s: Conversation, e: ev.ConversationCreated) -> Conversation:
    return replace(
        s,
        user_id=e.user_id,
        title=s.title if s.created_at is not None else e.title,
        model=e.model,
        created_at=e.occurred_at if s.created_at is None else min(s.created_at, e.occurred_at),
        titled_by_user=s.titled_by_user or bool(e.title),
    )


def _posted(s: Conversation, e: ev.MessagePosted) -> Conversation:
    if e.message_id in s.messages:  # a retried POST is a no-op: the first one stands
        return s
    msg = Message(e.message_id, e.parent_id, e.role, e.content, COMPLETE, None, e.occurred_at, tuple(e.document_ids))
    return replace(s.with_message(msg), user_id=s.user_id or e.user_id, selected_leaf_id=e.message_id)


def _requested(s: Conversation, e: ev.GenerationRequested) -> Conversation:
    known = s.messages.get(e.request_id)
    if known is not None and known.created_at is not None:  # a retried POST is a no-op
        return s if e.request_id in s.requested else replace(s, requested=s.requested | {e.request_id})
    s = replace(s, selected_leaf_id=e.request_id, requested=s.requested | {e.request_id})
    if known is not None:  # completion seen first: keep its outcome, learn when it began
        return s.with_message(replace(known, created_at=e.occurred_at, stream_offset=e.token_offset))
    return s.with_message(
        Message(e.request_id, e.parent_id, "assistant", "", STREAMING, None, e.occurred_at, stream_offset=e.token_offset)
    )


def _completed(s: Conversation, e: ev.GenerationCompleted) -> Conversation:
    known = s.messages.get(e.request_id)
    msg = Message(
        e.request_id,
        e.parent_id,
        "assistant",
        e.content,
        STATUS_BY_FINISH[e.finish_reason],
        e.finish_reason,
        known.created_at if known is not None else None,
        stream_offset=known.stream_offset if known is not None else None,
    )
    if e.request_id in s.moderated:
        msg = filtered(msg)
    return replace(s.with_message(msg), answered=s.answered | {e.request_id})


def filtered(msg: Message) -> Message:
    """``msg`` as moderation left it: the notice, ended content_filter."""
    return replace(msg, content=FILTERED_NOTICE, status=STATUS_BY_FINISH["content_filter"], finish_reason="content_filter")


def _moderated(s: Conversation, e: ev.GenerationModerated) -> Conversation:
    s = replace(s, moderated=s.moderated | {e.request_id})
    known = s.messages.get(e.request_id)
    if known is None or known.status == STREAMING:  # still streaming: its GenerationCompleted says when it ends
        return s
    return s.with_message(filtered(known))


def _leaf(s: Conversation, e: ev.LeafSelected) -> Conversation:
    return replace(s, selected_leaf_id=e.leaf_id)


def _renamed(s: Conversation, e: ev.ConversationRenamed) -> Conversation:
    return replace(s, title=e.title, titled_by_user=s.titled_by_user or e.by == "user")


def _deleted(s: Conversation, e: ev.ConversationDeleted) -> Conversation:
    return replace(s, deleted=True)


#: Every event type the tree understands; others leave the state as it is.
FOLD: dict[type[ev.Event], Callable[[Conversation, Any], Conversation]] = {
    ev.ConversationCreated: _created,
    ev.MessagePosted: _posted,
    ev.GenerationRequested: _requested,
    ev.GenerationCompleted: _completed,
    ev.LeafSelected: _leaf,
    ev.ConversationRenamed: _renamed,
    ev.ConversationDeleted: _deleted,
    ev.GenerationModerated: _moderated,
}


def apply(state: Conversation, event: ev.Event) -> Conversation:
    """The state after ``event``; an event of another conversation is a programming error."""
    step = FOLD.get(type(event))
    if step is None:
        return state
    if getattr(event, "conversation_id", None) != state.conversation_id:
        raise ValueError("event belongs to another conversation")
    return step(state, event)


def fold(events: list[ev.Event], state: Conversation | None = None) -> Conversation:
    """Apply ``events`` in order (to ``state``, or to an empty one of the first event's conversation)."""
    if state is None:
        if not events:
            raise ValueError("fold of no events needs a starting state")
        state = empty(str(getattr(events[0], "conversation_id")))
    for event in events:
        state = apply(state, event)
    return state


def branch(state: Conversation, leaf_id: str) -> list[Message]:
    """The messages from the root to ``leaf_id`` (inclusive), oldest first.

    Stops early at a parent the state does not know (the branch is then only
    the part it can prove); a cycle, which only corrupt input could create,
    ends the walk rather than looping.
    """
    path: list[Message] = []
    seen: set[str] = set()
    current: str | None = leaf_id
    while current is not None and current not in seen:
        msg = state.messages.get(current)
        if msg is None:
            break
        path.append(msg)
        seen.add(current)
        current = msg.parent_id
    path.reverse()
    return path


def children(state: Conversation, parent_id: str | None) -> list[Message]:
    """Siblings under ``parent_id`` (None: the roots), oldest first."""
    kids = [m for m in state.messages.values() if m.parent_id == parent_id]
    return sorted(kids, key=lambda m: (m.created_at or 0, m.message_id))
