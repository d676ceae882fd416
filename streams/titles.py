"""The titler: a conversation's title, written once by the small pool after its first reply.

A chat list of "Untitled chat" rows is no list. For a conversation this
processor saw begin (its ConversationCreated without a title) it keeps the
first user message; when the first reply ends well (stop or length) it asks
the small pool's engine for a few words naming that question (``streams.engine_writer``, greedy,
within a deadline) and emits ``ConversationRenamed(by="auto")``, an event like
any other, so the materializer projects it and replays agree. It never
overwrites a user's title: one given at creation or by a rename stops it here,
and the projection skips an automatic title that arrives after the user's.

A conversation it did not see begin (it started before this processor's
committed offset, or was forgotten from memory) is never titled: the first
question would be unknown. An engine failure leaves the conversation
untitled, to be tried again after its next reply.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from parley.ids import NS
from parley.lru import LRU
from schemas import events as ev
from streams.settings import TitlerSettings

log = logging.getLogger(__name__)

#: Characters of the question shown to the engine: a title needs the gist only.
EXCERPT_CHARS = 600
TITLE_CHARS = 60
#: Worded for the smallest pool (SmolLM2-135M follows this one; asked for "a title of the conversation
#: below" it answers the question instead). The reply is begun for it, so it writes inside the quotes.
INSTRUCTION = "You name conversations. Reply with a 2 to 5 word title."
OPENING = 'Title: "'
STOPS = ('"', "\n")


class Writer(Protocol):
    def ready(self) -> bool: ...

    async def write(
        self, messages: Sequence[ev.PromptMessage], max_tokens: int, stop: tuple[str, ...] = (), opening: str = ""
    ) -> tuple[str, str]: ...


class Untitled:
    """The writer when no engine is configured (PARLEY_TITLER_ENGINE_URL empty): never asked."""

    def ready(self) -> bool:
        return False

    async def write(
        self, messages: Sequence[ev.PromptMessage], max_tokens: int, stop: tuple[str, ...] = (), opening: str = ""
    ) -> tuple[str, str]:
        raise RuntimeError("no title engine configured")


@dataclass
class _Seen:
    question: str | None = None  # the first user message
    done: bool = False  # titled (by anyone), or not ours to title


class Titler:
    """Per-conversation memory and what to emit for each ``chat.events`` event (no Kafka in here)."""

    def __init__(self, cfg: TitlerSettings, writer: Writer) -> None:
        self.cfg = cfg
        self._writer = writer
        self._seen: LRU[str, _Seen] = LRU(cfg.conversations)

    async def handle(self, event: ev.Event) -> list[ev.Event]:
        cid = getattr(event, "conversation_id", "")
        if isinstance(event, ev.ConversationCreated):
            if self._seen.get(cid) is None:
                self._seen.put(cid, _Seen(done=bool(event.title)))
            return []
        seen = self._seen.get(cid)
        if seen is None or seen.done:
            return []
        if isinstance(event, (ev.ConversationRenamed, ev.ConversationDeleted)):
            seen.done = True
        elif isinstance(event, ev.MessagePosted) and event.role == "user" and seen.question is None:
            seen.question = event.content
        elif isinstance(event, ev.GenerationCompleted) and event.finish_reason in ("stop", "length") and event.content:
            if seen.question is not None and self._writer.ready():
                return await self._titled(event, seen.question, seen)
        return []

    async def _titled(self, reply: ev.GenerationCompleted, question: str, seen: _Seen) -> list[ev.Event]:
        try:
            text, _ = await self._writer.write(title_prompt(question), self.cfg.max_tokens, STOPS, OPENING)
        except Exception as exc:  # WriterUnavailable, or a bug: the conversation stays untitled for now
            log.warning("no title written", extra={"conversation_id": reply.conversation_id, "error": type(exc).__name__})
            return []
        title = clean_title(text)
        if not title:
            return []
        seen.done = True
        return [
            ev.ConversationRenamed(
                event_id=str(uuid.uuid5(NS, f"{reply.conversation_id}:auto-title")),  # one per conversation
                conversation_id=reply.conversation_id,
                user_id=reply.user_id,
                trace_id=reply.trace_id,
                title=title,
                by="auto",
                # Stamped with the reply's time, not the engine call's end: rows take the latest write
                # (USING TIMESTAMP occurred_at), and a rename the user made after seeing the reply must beat
                # a title that reached the log before it (the same time on every replay, too).
                occurred_at=reply.occurred_at,
            )
        ]


def title_prompt(question: str) -> list[ev.PromptMessage]:
    """The engine's prompt; the writer renders it in the small pool's chat template, the reply begun with OPENING."""
    ask = f"Name a conversation that starts with: {question[:EXCERPT_CHARS]}"
    return [ev.PromptMessage(role="system", content=INSTRUCTION), ev.PromptMessage(role="user", content=ask)]


def clean_title(text: str) -> str:
    """The engine's answer as a title: its first line, without quotes, a "Title:" label or end punctuation,
    cut at a word to ``TITLE_CHARS``."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    for _ in range(2):  # a label inside quotes, or quotes after a label
        line = line.strip().strip("\"'`*#").strip()
        line = re.sub(r"^(conversation title|title)\s*:\s*", "", line, flags=re.IGNORECASE)
    line = line.rstrip(".!:;,").strip()
    line = re.sub(r"\s+", " ", line)
    if len(line) > TITLE_CHARS:
        line = line[:TITLE_CHARS].rsplit(" ", 1)[0].rstrip(",;:")
    return line
