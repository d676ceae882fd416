"""Context builder: GenerationRequested on ``chat.events`` → InferenceRequested on ``chat.inference``.

It folds every conversation's events into its tree (``streams.tree``), and for
each generation asked for builds the prompt from the branch that ends at the
user message being answered (``streams.prompt``). A conversation it has not
seen since start-up (or forgot, the cache being bounded) is reloaded from the
materialized Cassandra rows first.

Once a branch outgrows the token budget, the window over it moves by blocks
of old turns, and a summary of what it dropped takes their place
(``streams.summary``). The builder writes that summary once, asking the small
pool's engine (``streams.engine_writer``) for it on the turn that moves the
window, and appends it as SummaryWritten to ``chat.events``; it folds
SummaryWritten events back into its state (and finds them in the
``summaries`` table after a restart) so later turns reuse it. Without a summary
(the engine down or slow) the turn is still built: the dropped turns are simply
left out.

Duplicates: a retried POST appends its GenerationRequested again; a request id
already requested or answered is skipped, so one turn generates once. Across
a restart the guarantee is at-least-once (see ``store.state_from_rows``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol

from parley.lru import LRU
from parley.retry import retrying
from schemas import events as ev
from schemas.endings import CONTEXT_UNAVAILABLE, ending, filtered
from streams import summary
from streams.context_tokens import TokenCounter
from streams.document_search import DocumentSearch
from streams.prompt import Layout, Prompt, Window, as_sent, choose_window, documents_text, render
from streams.settings import ContextSettings
from streams.summary import Summary, from_event, with_summary
from streams.engine_writer import EngineWriter, WriterUnavailable
from streams.moderator import Checker, Turn
from streams.tree import FOLD, Conversation, Message, apply, branch

log = logging.getLogger(__name__)

def layout(
    cfg: ContextSettings, *, summaries: bool, memory: Sequence[str] = (), retrieval: ev.Retrieval | None = None
) -> Layout:
    """The prompt layout the settings describe (``memory``: the user's facts, in the order given)."""
    return Layout(
        system_prompt=cfg.system_prompt,
        budget_tokens=cfg.budget_tokens,
        block_tokens=max(1, math.ceil(cfg.drop_fraction * cfg.budget_tokens)),
        summary_tokens=cfg.summary_tokens if summaries else 0,
        memory=tuple(memory),
        documents=documents_text(retrieval.passages, retrieval.note) if retrieval else "",
    )


def turn_documents(branch_: Sequence[Message]) -> list[str]:
    """The documents a turn uses: those named by every user message on its branch, first named first."""
    return list(dict.fromkeys(d for m in branch_ if m.role == "user" for d in m.document_ids))


def inference_request(
    state: Conversation,
    request: ev.GenerationRequested,
    prompt: Prompt,
    cfg: ContextSettings,
    retrieval: ev.Retrieval | None = None,
) -> ev.InferenceRequested:
    return ev.InferenceRequested(
        conversation_id=request.conversation_id,
        user_id=request.user_id,
        trace_id=request.trace_id,
        request_id=request.request_id,
        parent_id=request.parent_id,
        messages=prompt.messages,
        prompt_tokens=prompt.prompt_tokens,
        budget_tokens=cfg.budget_tokens,
        # As sent without a cap: 0, the rest of the routed pool's context (the router resolves it).
        max_tokens=request.max_tokens or (0 if request.as_sent else cfg.max_tokens),
        model=request.model or state.model,
        tier=request.tier,
        sampling=request.sampling,
        requested_at=request.occurred_at,
        retrieval=retrieval,
    )


def failed(request: ev.GenerationRequested) -> list[ev.Event]:
    """End a turn whose question is unknown: a prompt without it would answer something else."""
    return list(ending(request, "failed", CONTEXT_UNAVAILABLE, "the message being answered is not in the conversation's history"))


class ConversationLoader(Protocol):
    async def load(self, conversation_id: str) -> Conversation: ...


class SummaryLoader(Protocol):
    async def summaries(self, conversation_id: str) -> list[Summary]: ...


@dataclass(frozen=True)
class Known:
    """What the builder holds of one conversation: its tree and the summaries written for it."""

    conversation: Conversation
    summaries: Mapping[str, Summary] = field(default_factory=lambda: MappingProxyType({}))


class ContextBuilder:
    """The per-conversation states and what to emit for each event (no Kafka in here).

    ``summariser`` None: no summaries are written (turns beyond the budget are
    only dropped); ``stored`` None: none are loaded for a conversation seen cold.
    """

    def __init__(
        self,
        cfg: ContextSettings,
        store: ConversationLoader,
        *,
        stored: SummaryLoader | None = None,
        summariser: EngineWriter | None = None,
        counter: TokenCounter | None = None,
        retry_max_s: float = 30.0,
        memory: Callable[[str], Sequence[str]] | None = None,
        documents: DocumentSearch | None = None,
        screen: Checker | None = None,
    ) -> None:
        self.cfg = cfg
        self._documents = documents
        self._screen = screen
        self._memory = memory or (lambda user_id: ())
        self._store = store
        self._stored = stored
        self._summariser = summariser
        self._counter = counter or TokenCounter.from_spec(cfg.tokenizer)
        self._states: LRU[str, Known] = LRU(cfg.cache_conversations)
        self._retry_max_s = retry_max_s

    async def _load(self, conversation_id: str) -> Known:
        state = await retrying("loading a conversation", lambda: self._store.load(conversation_id), self._retry_max_s)
        known: Mapping[str, Summary] = MappingProxyType({})
        if self._stored is not None:
            rows = await retrying(
                "loading summaries", lambda: self._stored.summaries(conversation_id), self._retry_max_s  # type: ignore[union-attr]
            )
            for s in rows:
                known = with_summary(known, s)
        return Known(state, known)

    async def _wait_for_parent(self, known: Known, parent_id: str) -> Known:
        # Reloaded at this very event: the materializer may not have written the
        # user message yet (it runs beside us, on the same log). Give it time.
        deadline = time.monotonic() + self.cfg.parent_wait_s
        pause = 0.1
        while parent_id not in known.conversation.messages and time.monotonic() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
            known = await self._load(known.conversation.conversation_id)
        return known

    async def handle(self, event: ev.Event) -> list[ev.Event]:
        if type(event) not in FOLD and not isinstance(event, ev.SummaryWritten):
            return []
        cid = str(getattr(event, "conversation_id"))
        known = self._states.get(cid)
        cold = known is None
        if known is None:
            known = await self._load(cid)
        if isinstance(event, ev.SummaryWritten):
            self._states.put(cid, replace(known, summaries=with_summary(known.summaries, from_event(event))))
            return []
        out: list[ev.Event] = []
        if isinstance(event, ev.GenerationRequested) and not known.conversation.seen_request(event.request_id):
            if cold and event.parent_id not in known.conversation.messages:
                known = await self._wait_for_parent(known, event.parent_id)
            stopped = await self.screened(known.conversation, event)
            if stopped:
                out.extend(stopped)
            elif event.parent_id in known.conversation.messages and event.as_sent:
                prompt = as_sent(branch(known.conversation, event.parent_id), self._counter)
                out.append(inference_request(known.conversation, event, prompt, self.cfg))
            elif event.parent_id in known.conversation.messages:
                retrieval = await self.search(known.conversation, event)
                written, prompt = await self.prompt_for(known, event, memory=self._memory(event.user_id), retrieval=retrieval)
                for w in written:
                    known = replace(known, summaries=with_summary(known.summaries, from_event(w)))
                out.extend(written)
                out.append(inference_request(known.conversation, event, prompt, self.cfg, retrieval))
            else:
                log.error(
                    "generation asked for an unknown message; failing it",
                    extra={"conversation_id": cid, "request_id": event.request_id},
                )
                out.extend(failed(event))
        self._states.put(cid, replace(known, conversation=apply(known.conversation, event)))
        return out

    async def screened(self, state: Conversation, request: ev.GenerationRequested) -> list[ev.Event]:
        """Under a strict policy, the input is checked before the prompt goes out: the events that stop a
        flagged turn (none when it is clean, or the policy checks beside the generation)."""
        message = state.messages.get(request.parent_id)
        if self._screen is None or message is None or self._screen.policy_for(request.tier, request.org_id).mode != "strict":
            return []
        turn = Turn(
            request.conversation_id, request.user_id, request.request_id, request.parent_id, request.tier, request.trace_id,
            request.org_id,
        )
        check = await self._screen.input(turn, message.content)
        if not check.flagged:
            return []
        marks = [e for e in check.events if not isinstance(e, ev.GenerationCancelRequested)]  # nothing started
        return [*marks, *filtered(request)]

    async def search(self, state: Conversation, request: ev.GenerationRequested) -> ev.Retrieval | None:
        """The turn's document search (streams/document_search.py); None when its branch names no document."""
        on_branch = branch(state, request.parent_id)
        documents = turn_documents(on_branch)
        if not documents:
            return None
        if self._documents is None:
            missing = [ev.DocumentCoverage(document_id=d, status="missing") for d in documents]
            return ev.Retrieval(path="none", documents=missing, note="Document search is not configured here.")
        question = state.messages[request.parent_id].content
        return await self._documents.search(request.user_id, documents, question)

    async def prompt_for(
        self,
        known: Known,
        request: ev.GenerationRequested,
        memory: Sequence[str] = (),
        retrieval: ev.Retrieval | None = None,
    ) -> tuple[list[ev.SummaryWritten], Prompt]:
        """The prompt answering ``request``, and the summaries written for it (none on most turns)."""
        shape = layout(self.cfg, summaries=self._summariser is not None, memory=memory, retrieval=retrieval)
        window = choose_window(branch(known.conversation, request.parent_id), shape, self._counter)
        if not window.boundary:
            return [], render(window, shape, self._counter)
        wanted = summary.plan(window, known.summaries, self.cfg.summary_max_steps)
        written = await self._summarise(request, window, wanted, shape) if wanted.steps else []
        current = from_event(written[-1]) if written else wanted.previous
        if current is not None and current.through_message_id != window.through_id:
            current = None  # the engine failed part way: no summary reaches the window's start
        return written, render(window, shape, self._counter, current.content if current else None)

    async def _summarise(
        self, request: ev.GenerationRequested, window: Window, wanted: summary.Plan, shape: Layout
    ) -> list[ev.SummaryWritten]:
        """Fold each missing block into the summary, one engine call each; stop at the first failure."""
        if self._summariser is None or not self._summariser.ready():
            return []
        limit = summary.text_budget(self._counter, shape.summary_tokens)
        previous, out = wanted.previous, []
        for start, end in wanted.steps:
            block = window.usable[start:end]
            prompt = summary.request_messages(previous.content if previous else None, block)
            try:
                text, model = await self._summariser.write(prompt, limit)
            except WriterUnavailable as exc:
                # Never the text: only where and why. The turn goes on without the summary.
                log.warning(
                    "no summary for this turn: %s",
                    exc,
                    extra={"conversation_id": request.conversation_id, "request_id": request.request_id},
                )
                break
            text = summary.clip(text, self._counter, limit)
            event = summary.written(request, previous, block, text, self._counter.segment(text), model)
            out.append(event)
            previous = from_event(event)
        return out
