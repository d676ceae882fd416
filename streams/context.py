"""Context builder: GenerationRequested on ``chat.events`` → InferenceRequested on ``chat.inference``.

It folds every conversation's events into its tree (``streams.tree``), and for
each generation asked for builds the prompt from the branch that ends at the
user message being answered (``streams.prompt``). A conversation it has not
seen since start-up (or forgot, the cache being bounded) is reloaded from the
materialized Cassandra rows first.

Once a branch outgrows the token budget (or the byte budget of a record,
``streams.prompt_bytes``), the window over it moves by blocks of old turns,
and a summary of what it dropped takes their place (``streams.summary``). No
turn waits for a summary. It is written off the turns' path, as soon as the
window comes within a block of its next move (``Window.ahead``), so the turn
that moves usually finds it written and the prompt's prefix breaks once per
move; a turn that moves before it is ready is built with the newest summary
already written for the branch (covering less than was dropped) or none. A
task of the builder asks the small pool's engine (``streams.engine_writer``,
at the background priority) and holds the result until the builder next
handles an event of that conversation (the turn's own GenerationCompleted, at
the latest the next turn's MessagePosted). That handling appends it as
SummaryWritten to ``chat.events``, through the same acknowledged produce as
every output, and uses it from then on. One summary is written per window
move: its id derives from the range it covers, a range being written is not
asked for twice, and a SummaryWritten read back (or found in the
``summaries`` table after a restart) is folded in, the first of an id
standing. Without a summary (the engine down or slow) turns are still built:
the dropped turns are simply left out.

Prompts are counted, and weighed in bytes, in the builder's one counting
thread: tokenising is CPU work, and on the event loop it would hold up every
conversation of every lane. A prompt that cannot fit a record even with only
its question (an as-sent history, a single enormous message with documents)
ends the turn ``context_too_long`` instead of being dead-lettered unread.

Duplicates: a retried POST appends its GenerationRequested again; a request id
already requested or answered is skipped, so one turn generates once. Across
a restart the guarantee is at-least-once (see ``store.state_from_rows``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from parley.lru import LRU
from parley.retry import retrying
from schemas import events as ev
from schemas.endings import CONTEXT_TOO_LONG, CONTEXT_UNAVAILABLE, ending, filtered
from streams import summary
from streams.context_tokens import TokenCounter
from streams.document_search import DocumentSearch
from streams.prompt import Layout, Prompt, Window, as_sent, choose_window, documents_text, render
from streams.prompt_bytes import ROUTED_BYTES, wire_bytes
from streams.settings import ContextSettings
from streams.summary import Summary, from_event, with_summary
from streams.engine_writer import EngineWriter, WriterUnavailable
from streams.moderator import Checker, Turn
from streams.tree import FOLD, Conversation, Message, apply, branch

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Summaries being written at once; past that a window move waits for a later turn to ask again.
SUMMARY_TASKS = 32
#: UTF-8 bytes of an English token, on average (BPE): only for the start-up warning of a budget no record holds.
TYPICAL_TOKEN_BYTES = 4


def layout(
    cfg: ContextSettings,
    *,
    summaries: bool,
    memory: Sequence[str] = (),
    retrieval: ev.Retrieval | None = None,
    budget_bytes: int = 0,
    block_bytes: int = 0,
    owner: str = "",
) -> Layout:
    """The prompt layout the settings describe (``memory``: the user's facts, in the order given)."""
    return Layout(
        system_prompt=cfg.system_prompt,
        budget_tokens=cfg.budget_tokens,
        block_tokens=max(1, math.ceil(cfg.drop_fraction * cfg.budget_tokens)),
        summary_tokens=cfg.summary_tokens if summaries else 0,
        memory=tuple(memory),
        documents=documents_text(retrieval.passages, retrieval.note) if retrieval else "",
        budget_bytes=budget_bytes,
        block_bytes=block_bytes,
        owner=owner,
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
        tools=request.tools,
        experiment=request.experiment,
    )


def failed(request: ev.GenerationRequested) -> list[ev.Event]:
    """End a turn whose question is unknown: a prompt without it would answer something else."""
    return list(ending(request, "failed", CONTEXT_UNAVAILABLE, "the message being answered is not in the conversation's history"))


def too_long(request: ev.GenerationRequested, size: int, limit: int) -> list[ev.Event]:
    """End a turn whose prompt cannot fit a record: no consumer would read it, and the user would wait forever."""
    what = "the messages sent" if request.as_sent else "the message being answered, with its documents,"
    message = f"{what} take {size} bytes once encrypted, over the {limit}-byte limit of a prompt; send less text"
    return list(ending(request, "failed", CONTEXT_TOO_LONG, message))


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
    ``record_bytes``: the largest record the consumers read (the shell passes
    ``parley.consumer.DEFAULT_MAX_EVENT_BYTES``); None: prompts are not weighed in bytes.
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
        record_bytes: int | None = None,
    ) -> None:
        self.cfg = cfg
        #: Most bytes an InferenceRequested may take: the router sends it on again inside an InferenceRouted.
        self._request_bytes = record_bytes - ROUTED_BYTES if record_bytes else None
        self._documents = documents
        self._screen = screen
        self._memory = memory or (lambda user_id: ())
        self._store = store
        self._stored = stored
        self._summariser = summariser
        self._counter = counter or TokenCounter.from_spec(cfg.tokenizer)
        self._states: LRU[str, Known] = LRU(cfg.cache_conversations)
        self._retry_max_s = retry_max_s
        # One thread: the counter's cache is not shared between two prompts being counted at once.
        self._counting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="context-count")
        #: Summaries being written, by the id of the last one each task writes.
        self._writing: dict[str, asyncio.Task[None]] = {}
        #: Summaries written and not yet appended, by conversation (bounded: one forgotten is written again when needed).
        self._ready: LRU[str, list[ev.SummaryWritten]] = LRU(cfg.cache_conversations)
        if self._request_bytes is not None and cfg.budget_tokens * TYPICAL_TOKEN_BYTES * 4 // 3 > self._request_bytes:
            log.warning(
                "PARLEY_CONTEXT_BUDGET_TOKENS=%d is more than a Kafka record holds (%d bytes, sealed, about %d tokens "
                "of English): long conversations are windowed to fit the record before they reach the token budget",
                cfg.budget_tokens, self._request_bytes, self._request_bytes * 3 // 4 // TYPICAL_TOKEN_BYTES,
            )

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
        known = folded(known, self._ready.get(cid) or ())  # written in the background: this turn may use them
        out: list[ev.Event] = []
        if isinstance(event, ev.SummaryWritten):
            known = folded(known, [event])
        else:
            known, out = await self._turn(known, event, cold)
        # Taken only now: a handler that raised above is run again, and must find them still here.
        written = self._ready.pop(cid) or []
        self._states.put(cid, folded(known, written))
        return [*written, *out]

    async def _turn(self, known: Known, event: ev.Event, cold: bool) -> tuple[Known, list[ev.Event]]:
        """``known`` with ``event`` applied, and what to emit for it."""
        cid = known.conversation.conversation_id
        out: list[ev.Event] = []
        if isinstance(event, ev.GenerationRequested) and not known.conversation.seen_request(event.request_id):
            if cold and event.parent_id not in known.conversation.messages:
                known = await self._wait_for_parent(known, event.parent_id)
            stopped = await self.screened(known.conversation, event)
            if stopped:
                out.extend(stopped)
            elif event.parent_id in known.conversation.messages and event.as_sent:
                on_branch = branch(known.conversation, event.parent_id)
                prompt = await self._count(as_sent, on_branch, self._counter, event.tools)
                out.extend(await self._checked(inference_request(known.conversation, event, prompt, self.cfg), event))
            elif event.parent_id in known.conversation.messages:
                retrieval = await self.search(known.conversation, event)
                prompt = await self.prompt_for(known, event, memory=self._memory(event.user_id), retrieval=retrieval)
                request = inference_request(known.conversation, event, prompt, self.cfg, retrieval)
                out.extend(await self._checked(request, event))
            else:
                log.error(
                    "generation asked for an unknown message; failing it",
                    extra={"conversation_id": cid, "request_id": event.request_id},
                )
                out.extend(failed(event))
        return replace(known, conversation=apply(known.conversation, event)), out

    async def _count(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the counting thread: tokenising never holds up the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._counting, partial(fn, *args))

    async def _checked(self, request: ev.InferenceRequested, turn: ev.GenerationRequested) -> list[ev.Event]:
        """``request``, or the ending of a turn whose prompt no record can hold."""
        if self._request_bytes is None:
            return [request]
        size = await self._count(wire_bytes, request)
        if size <= self._request_bytes:
            return [request]
        log.warning(
            "a prompt too large for a record; the turn ends context_too_long",
            extra={"conversation_id": turn.conversation_id, "request_id": turn.request_id, "bytes": size},
        )
        return too_long(turn, size, self._request_bytes)

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
    ) -> Prompt:
        """The prompt answering ``request``, never waiting for a summary: those a window move needs are written in the background."""
        budget_bytes = block_bytes = 0
        if self._request_bytes is not None:  # what is left of a record once the rest of the request is in it
            bare = inference_request(known.conversation, request, Prompt([], 0, 0), self.cfg, retrieval)
            budget_bytes = max(1, self._request_bytes - await self._count(wire_bytes, bare))
            block_bytes = max(1, math.ceil(self.cfg.drop_fraction * self._request_bytes))  # the same on every turn
        shape = layout(
            self.cfg, summaries=self._summariser is not None, memory=memory, retrieval=retrieval,
            budget_bytes=budget_bytes, block_bytes=block_bytes, owner=request.user_id,
        )
        on_branch = branch(known.conversation, request.parent_id)
        window = await self._count(choose_window, on_branch, shape, self._counter)
        current, missing = None, False
        if window.boundary:
            wanted = summary.plan(window, known.summaries, self.cfg.summary_max_steps)
            # The newest summary there is: all the window drops when nothing is missing, else an older part of it.
            current, missing = wanted.previous, bool(wanted.steps)
            if missing:
                self._write_later(request, window, wanted, shape)
        if window.ahead and not missing:  # (a summary still missing here is the start of the next one)
            # The next move is near: its summary is written now, so the turn that moves shows it (one prefix break).
            future = replace(window, bounds=(*window.bounds, window.ahead), start=window.ahead, ahead=0)
            later = summary.plan(future, known.summaries, self.cfg.summary_max_steps)
            if later.steps:
                self._write_later(request, future, later, shape)
        return await self._count(render, window, shape, self._counter, current.content if current else None)

    def _write_later(self, request: ev.GenerationRequested, window: Window, wanted: summary.Plan, shape: Layout) -> None:
        """Start writing the summaries ``wanted`` asks for, unless they are being written or the engine is out."""
        if self._summariser is None or not self._summariser.ready() or len(self._writing) >= SUMMARY_TASKS:
            return
        (first, _), (_, end) = wanted.steps[0], wanted.steps[-1]
        covered = [*(wanted.previous.covered if wanted.previous else ()), *(m.message_id for m in window.usable[first:end])]
        last = summary.summary_id(request.conversation_id, covered)
        if last in self._writing:
            return
        task = asyncio.create_task(self._summarise(request, window, wanted, shape))
        self._writing[last] = task
        task.add_done_callback(lambda _: self._writing.pop(last, None))

    async def settled(self) -> None:
        """Wait for the summaries being written (tests; a shutdown that lets them finish)."""
        while self._writing:
            await asyncio.gather(*self._writing.values(), return_exceptions=True)

    async def _summarise(self, request: ev.GenerationRequested, window: Window, wanted: summary.Plan, shape: Layout) -> None:
        """Fold each missing block into the summary, one engine call each; stop at the first failure.
        Each one written is held for the conversation's next event to append (``handle``)."""
        assert self._summariser is not None
        previous = wanted.previous
        try:
            limit = await self._count(summary.text_budget, self._counter, shape.summary_tokens)
            for start, end in wanted.steps:
                block = window.usable[start:end]
                prompt = summary.request_messages(previous.content if previous else None, block)
                try:
                    text, model = await self._summariser.write(prompt, limit)
                except WriterUnavailable as exc:
                    # Never the text: only where and why. The turns go on without the summary.
                    log.warning(
                        "no summary for this window: %s",
                        exc,
                        extra={"conversation_id": request.conversation_id, "request_id": request.request_id},
                    )
                    return
                text = await self._count(summary.clip, text, self._counter, limit)
                tokens = await self._count(self._counter.segment, text)
                event = summary.written(request, previous, block, text, tokens, model)
                held = self._ready.get(request.conversation_id)
                if held is None:
                    held = []
                    self._ready.put(request.conversation_id, held)
                held.append(event)
                previous = from_event(event)
        except Exception as exc:  # a bug: by type and line only (its text may quote the conversation); turns go on
            where = traceback.extract_tb(exc.__traceback__)[-1]
            log.error(
                "writing a summary failed",
                extra={"conversation_id": request.conversation_id, "error_type": type(exc).__name__, "where": f"{where.filename}:{where.lineno}"},
            )


def folded(known: Known, written: Sequence[ev.SummaryWritten]) -> Known:
    """``known`` with the summaries ``written`` (the first of an id stands)."""
    summaries = known.summaries
    for w in written:
        summaries = with_summary(summaries, from_event(w))
    return known if summaries is known.summaries else replace(known, summaries=summaries)
