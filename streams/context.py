"""Context builder: GenerationRequested on ``chat.events`` → InferenceRequested on ``chat.inference``.

It folds every conversation's events into its tree (``streams.tree``), and for
each generation asked for builds the prompt from the branch that ends at the
user message being answered (``streams.prompt``). A conversation it has not
seen since start-up (or forgot, the cache being bounded) is reloaded from the
materialized Cassandra rows first.

Duplicates: a retried POST appends its GenerationRequested again; a request id
already requested or answered is skipped, so one turn generates once. Across
a restart the guarantee is at-least-once (see ``store.state_from_rows``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

import faust

from parley.settings import KafkaSettings
from schemas import events as ev
from schemas.catalog import topic_name_for
from streams.app import decoded, raw_topic
from streams.lru import LRU
from streams.prompt import build_prompt
from streams.settings import ContextSettings, StreamsSettings
from streams.shell import dead_letter_current, processor_app, send_event
from streams.store import Store, retrying
from streams.tree import FOLD, Conversation, apply, branch

log = logging.getLogger(__name__)

#: error_code of a generation failed because the message it answers is unknown.
CONTEXT_UNAVAILABLE = "context_unavailable"


def plan(state: Conversation, request: ev.GenerationRequested, cfg: ContextSettings) -> ev.InferenceRequested | None:
    """The InferenceRequested for ``request``; None when it was already requested or answered."""
    if state.seen_request(request.request_id):
        return None
    prompt = build_prompt(cfg.system_prompt, branch(state, request.parent_id), cfg.budget_tokens)
    return ev.InferenceRequested(
        conversation_id=request.conversation_id,
        user_id=request.user_id,
        trace_id=request.trace_id,
        request_id=request.request_id,
        parent_id=request.parent_id,
        messages=prompt.messages,
        prompt_tokens=prompt.prompt_tokens,
        budget_tokens=cfg.budget_tokens,
        max_tokens=request.max_tokens or cfg.max_tokens,
        model=request.model or state.model,
        tier=request.tier,
    )


def failed(request: ev.GenerationRequested) -> list[ev.Event]:
    """End a turn whose question is unknown: a prompt without it would answer something else.

    The final TokenChunk tells the gateway streaming the reply; the
    GenerationCompleted records the outcome in the log (and the tables).
    """
    text = "the message being answered is not in the conversation's history"
    common = {"conversation_id": request.conversation_id, "user_id": request.user_id, "trace_id": request.trace_id}
    return [
        ev.TokenChunk(
            **common,
            request_id=request.request_id,
            seq=0,
            finish_reason="failed",
            error_code=CONTEXT_UNAVAILABLE,
            error_message=text,
        ),
        ev.GenerationCompleted(
            **common,
            request_id=request.request_id,
            parent_id=request.parent_id,
            finish_reason="failed",
            error_code=CONTEXT_UNAVAILABLE,
            error_message=text,
        ),
    ]


class ConversationLoader(Protocol):
    async def load(self, conversation_id: str) -> Conversation: ...


class ContextBuilder:
    """The per-conversation states and what to emit for each event (no Kafka in here)."""

    def __init__(self, cfg: ContextSettings, store: ConversationLoader, *, retry_max_s: float = 30.0) -> None:
        self.cfg = cfg
        self._store = store
        self._states: LRU[str, Conversation] = LRU(cfg.cache_conversations)
        self._retry_max_s = retry_max_s

    async def _load(self, conversation_id: str) -> Conversation:
        return await retrying("loading a conversation", lambda: self._store.load(conversation_id), self._retry_max_s)

    async def _wait_for_parent(self, state: Conversation, parent_id: str) -> Conversation:
        # Reloaded at this very event: the materializer may not have written the
        # user message yet (it runs beside us, on the same log). Give it time.
        deadline = time.monotonic() + self.cfg.parent_wait_s
        pause = 0.1
        while parent_id not in state.messages and time.monotonic() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
            state = await self._load(state.conversation_id)
        return state

    async def handle(self, event: ev.Event) -> list[ev.Event]:
        if type(event) not in FOLD:
            return []
        cid = str(getattr(event, "conversation_id"))
        state = self._states.get(cid)
        cold = state is None
        if state is None:
            state = await self._load(cid)
        out: list[ev.Event] = []
        if isinstance(event, ev.GenerationRequested) and not state.seen_request(event.request_id):
            if cold and event.parent_id not in state.messages:
                state = await self._wait_for_parent(state, event.parent_id)
            request = plan(state, event, self.cfg) if event.parent_id in state.messages else None
            if request is not None:
                out.append(request)
            else:
                log.error(
                    "generation asked for an unknown message; failing it",
                    extra={"conversation_id": cid, "request_id": event.request_id},
                )
                out.extend(failed(event))
        self._states.put(cid, apply(state, event))
        return out


def build_app(streams: StreamsSettings, kafka: KafkaSettings, cfg: ContextSettings, store: Store) -> faust.App:
    app, group = processor_app(streams, kafka, "context")
    source = raw_topic(app, kafka, "chat.events")
    sinks = {name: raw_topic(app, kafka, name) for name in ("chat.inference", "chat.tokens", "chat.events")}
    builder = ContextBuilder(cfg, store)

    @app.agent(source, name="context")
    async def context(stream: faust.StreamT) -> None:
        async for event in decoded(app, stream, consumer=group):
            try:
                out = await builder.handle(event)
            except ValueError as exc:  # an id that is not a UUID, and the like: the record is bad
                await dead_letter_current(app, stream, group, exc)
                continue
            for produced in out:
                await send_event(sinks[topic_name_for(produced)], produced)

    return app
