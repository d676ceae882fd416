"""The search processor's core: ``chat.events`` in, each text that changed written to the search index.

Group ``streams.search``. Which events change searchable text, and what each does:

- ConversationCreated, ConversationRenamed: the title (indexed under the conversation's own id);
- MessagePosted: a user's (or an as-sent assistant's) message; system and tool messages are not searched;
- GenerationCompleted: the reply's text, or, when the reply ended ``content_filter``, nothing (withdrawn);
- GenerationModerated: the reply became the moderation notice: its rows go, and stay gone;
- ConversationDeleted: every row of the conversation goes, and a mark stops later events adding any.

Each call rewrites the same rows for the same event (a message's rows are replaced by its latest
text), so redelivery and replay are harmless. The rows (``SearchRows``) are streams/search_index.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from schemas import events as ev

#: Roles whose messages are searched.
SEARCHED_ROLES = frozenset({"user", "assistant"})


class SearchRows(Protocol):
    async def index(self, user_id: str, conversation_id: str, message_id: str, text: str) -> None:
        """The text of a message (or, under the conversation's id, its title) now ``text``."""

    async def withdraw(self, user_id: str, conversation_id: str, message_id: str) -> None:
        """The message is never searched again (a later ``index`` of it is ignored)."""

    async def drop(self, user_id: str, conversation_id: str) -> None:
        """The conversation is deleted: every row of it goes, and later ``index`` calls are ignored."""


class SearchIndexer:
    def __init__(self, rows: SearchRows) -> None:
        self._rows = rows
        self._dispatch: dict[type[ev.Event], Callable[[Any], Awaitable[None]]] = {
            ev.ConversationCreated: self._title,
            ev.ConversationRenamed: self._title,
            ev.MessagePosted: self._posted,
            ev.GenerationCompleted: self._completed,
            ev.GenerationModerated: self._moderated,
            ev.ConversationDeleted: self._deleted,
        }

    async def handle(self, event: ev.Event) -> list[ev.Event]:
        step = self._dispatch.get(type(event))
        if step is not None:
            await step(event)
        return []

    async def _title(self, e: ev.ConversationCreated | ev.ConversationRenamed) -> None:
        await self._rows.index(e.user_id, e.conversation_id, e.conversation_id, e.title)

    async def _posted(self, e: ev.MessagePosted) -> None:
        if e.role in SEARCHED_ROLES:
            await self._rows.index(e.user_id, e.conversation_id, e.message_id, e.content)

    async def _completed(self, e: ev.GenerationCompleted) -> None:
        if e.finish_reason == "content_filter":
            await self._rows.withdraw(e.user_id, e.conversation_id, e.request_id)
        else:
            await self._rows.index(e.user_id, e.conversation_id, e.request_id, e.content)

    async def _moderated(self, e: ev.GenerationModerated) -> None:
        await self._rows.withdraw(e.user_id, e.conversation_id, e.request_id)

    async def _deleted(self, e: ev.ConversationDeleted) -> None:
        await self._rows.drop(e.user_id, e.conversation_id)
