"""What posting a message needs to know when Cassandra is down: who owns the conversation, and
its messages as this gateway last read them plus what it appended since.

Posting reads Cassandra only to check ownership, pick the default parent and
spot a retried POST; the reply itself comes from Kafka. So while Cassandra is
unreachable, a conversation this process has recently served keeps taking
messages from this cache (other reads still answer 503). Ownership never
changes, so a cached owner is always right; the message list may miss what
another gateway appended meanwhile, which at worst makes a new message a
sibling rather than a child: the tree stays valid. No message text is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from gateway.store import ConversationRow, MessageRow
from schemas.events import (
    ConversationCreated,
    ConversationDeleted,
    Event,
    GenerationRequested,
    LeafSelected,
    MessagePosted,
)
from parley.lru import LRU

#: Messages remembered per conversation (the newest): enough to find the branch's end and recent replies.
PER_CONVERSATION = 500


@dataclass
class _Known:
    conversation: ConversationRow
    messages: dict[str, MessageRow] = field(default_factory=dict)  # id → message, oldest first, without text


class Recent:
    def __init__(self, conversations: int = 10_000) -> None:
        self._known: LRU[str, _Known] = LRU(conversations)

    def saw(self, conversation: ConversationRow, messages: list[MessageRow] | None = None) -> None:
        """Cassandra answered: remember what it said (``messages`` None: only the conversation was read)."""
        known = self._known.get(conversation.id)
        kept = known.messages if known is not None and messages is None else {}
        for m in messages or ():
            kept[m.id] = replace(m, content="")
        self._known.put(conversation.id, _Known(conversation, _trim(kept)))

    def conversation(self, conversation_id: str) -> ConversationRow | None:
        known = self._known.get(conversation_id)
        return None if known is None else known.conversation

    def messages(self, conversation_id: str) -> list[MessageRow] | None:
        known = self._known.get(conversation_id)
        return None if known is None else list(known.messages.values())

    def appended(self, event: Event) -> None:
        """Fold in an event this gateway appended, as the materializer will."""
        if isinstance(event, ConversationCreated):
            created = _time(event.occurred_at)
            conversation = ConversationRow(event.conversation_id, event.user_id, event.title, event.model, None, created)
            self._known.put(event.conversation_id, _Known(conversation))
            return
        cid = getattr(event, "conversation_id", None)
        if isinstance(event, ConversationDeleted) and isinstance(cid, str):
            self._known.pop(cid)  # gone from every read path: this cache is one
            return
        known = self._known.get(cid) if isinstance(cid, str) else None
        if known is None:
            return
        if isinstance(event, MessagePosted):
            known.messages.setdefault(
                event.message_id,
                MessageRow(event.message_id, event.parent_id, event.role, "", event.model, "complete", None, None, None, None,
                        _time(event.occurred_at)),
            )
            known.conversation = replace(known.conversation, selected_leaf_id=event.message_id)
        elif isinstance(event, GenerationRequested):
            known.messages.setdefault(
                event.request_id,
                MessageRow(event.request_id, event.parent_id, "assistant", "", event.model, "streaming", None, None,
                        0, event.token_offset, _time(event.occurred_at)),
            )
            known.conversation = replace(known.conversation, selected_leaf_id=event.request_id)
        elif isinstance(event, LeafSelected):
            known.conversation = replace(known.conversation, selected_leaf_id=event.leaf_id)
        known.messages = _trim(known.messages)


def _trim(messages: dict[str, MessageRow]) -> dict[str, MessageRow]:
    if len(messages) <= PER_CONVERSATION:
        return messages
    return dict(list(messages.items())[-PER_CONVERSATION:])


def _time(occurred_at_us: int) -> datetime:
    return datetime.fromtimestamp(occurred_at_us / 1e6, tz=timezone.utc).replace(tzinfo=None)
