"""Moderation of each turn beside its generation: the core of the ``moderation`` processor.

Nothing here waits in front of the reply. The input is checked while the
context builder builds the prompt and the engine prefills it; the reply is
checked in windows as its chunks stream past (every ``window_tokens`` tokens,
each check reaching ``overlap_tokens`` back so a sentence split by a window
edge is still seen whole, as NeMo Guardrails' streaming output rails do), and
its tail once more when it ends. Every check is a ``ModerationResult`` on
``chat.moderation``. A flag the turn's policy blocks also stops the
generation (``GenerationCancelRequested(reason=moderation)`` on
``chat.control``: the worker aborts and ends the reply ``content_filter``)
and marks the turn (``GenerationModerated`` on ``chat.events``: the stored
reply becomes the notice, whatever order the worker's ending lands in).

Restarts: a check is a pure function of the text, its event id is derived
from the request, attempt, stage and window end, and the events a flag
writes are idempotent downstream (a second cancel of an ended request is
ignored; a second GenerationModerated writes the same cells). A reply whose
stream this instance did not see from its first chunk (it started before a
restart) is checked whole from its ``GenerationCompleted``, so no text goes
unchecked. Policy ``mode: strict`` additionally has the context builder check
the input before the prompt goes out (``Checker.input`` is shared).

A check whose classifier gives no verdict (down, timed out, or an answer that
is not one) is tried again with backoff for ``give_up_s`` (``classifier.judge``),
and then fails closed: a ``ModerationResult`` with verdict ``failed`` stops the
turn as a flag does (cut, or withdrawn if it has ended). It is never a pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from moderation.classifier import Classifier, NoVerdict, Scores, judge
from moderation.policy import OrgPolicy, Policy, TierPolicy
from parley import ids
from parley.lru import LRU
from parley.retry import retrying
from parley.metrics import MODERATION_CHECK_SECONDS, MODERATION_CHECKS, MODERATION_CUT_SECONDS, MODERATION_FLAGS
from schemas import events as ev
from streams.tree import Conversation, Message

log = logging.getLogger(__name__)

#: Longest pause between tries of a dependency (the classifier, Cassandra) that is unavailable.
RETRY_MAX_S = 5.0


# ------------------------------------------------------------------ one check


@dataclass(frozen=True)
class Check:
    """A check's result and the events it makes."""

    result: ev.ModerationResult
    events: list[ev.Event]

    @property
    def flagged(self) -> bool:
        """The turn is stopped: a category its policy blocks was flagged, or no verdict came (fail closed)."""
        return self.result.verdict != "clean"


@dataclass(frozen=True)
class Turn:
    """What the checks of one turn need to know about it (from its GenerationRequested)."""

    conversation_id: str
    user_id: str
    request_id: str
    parent_id: str
    tier: str = "free"
    trace_id: str = ""
    org_id: str = ""  # its organisation's own policy, where it set one, applies


class Checker:
    """A classifier under a policy: text → ``Check``. Shared by the processor and the strict context builder."""

    def __init__(
        self,
        classifier: Classifier,
        policy: Policy,
        redact: Callable[[str], str] | None = None,
        *,
        timeout_s: float = 5.0,
        give_up_s: float = 20.0,
    ) -> None:
        self.classifier = classifier
        self.policy = policy
        # One try's longest wait, and how long a check keeps trying before it fails closed (PARLEY_MODERATION_*).
        self._timeout_s, self._give_up_s = timeout_s, give_up_s
        # What a policy keeps of a flagged text for review, with personal data replaced (moderation/pii.py).
        self._redact = redact
        #: Organisations' own policies (``org_policies``), replaced whole by the processor's refresh timer.
        self.orgs: Mapping[str, OrgPolicy] = {}

    def policy_for(self, tier: str, org_id: str = "") -> TierPolicy:
        base = self.policy.for_tier(tier)
        own = self.orgs.get(org_id) if org_id else None
        return own.over(base) if own is not None else base

    async def input(self, turn: Turn, text: str) -> Check:
        return await self._check(turn, text, direction="input", stage="input", message_id=turn.parent_id, ended=False)

    async def output(
        self, turn: Turn, text: str, *, attempt: int, stage: str, start: int, end: int, ended: bool
    ) -> Check:
        return await self._check(
            turn, text, direction="output", stage=stage, message_id=turn.request_id, attempt=attempt, start=start, end=end,
            ended=ended,
        )

    async def _check(
        self,
        turn: Turn,
        text: str,
        *,
        direction: str,
        stage: str,
        message_id: str,
        ended: bool,
        attempt: int = 0,
        start: int = 0,
        end: int = 0,
    ) -> Check:
        policy = self.policy_for(turn.tier, turn.org_id)
        began = time.perf_counter()
        # A classifier that gives no verdict stalls this check (and its lane) while it is tried again, never skips it.
        scores: Scores | None
        try:
            scores = await judge(
                self.classifier, text, timeout_s=self._timeout_s, give_up_s=self._give_up_s, max_pause_s=RETRY_MAX_S,
                ids=_ids(turn),
            )
        except NoVerdict as exc:
            log.error("a moderation check gave no verdict; the turn is stopped (fail closed)", extra={**_ids(turn), "error": str(exc)})
            scores = None
        took = time.perf_counter() - began
        MODERATION_CHECK_SECONDS.labels(direction).observe(took)
        categories = list(policy.flags(scores)) if scores is not None else []
        verdict = "failed" if scores is None else ("flagged" if categories else "clean")
        action = "none" if verdict == "clean" else ("withdrawn" if ended else "cut")
        MODERATION_CHECKS.labels(direction, stage, verdict).inc()
        for category in categories:
            MODERATION_FLAGS.labels(category, direction, action).inc()
        envelope = {"conversation_id": turn.conversation_id, "user_id": turn.user_id, "trace_id": turn.trace_id}
        kept = None
        if categories and policy.retain_flagged:
            kept = await asyncio.to_thread(self._redact, text) if self._redact is not None else text
        result = ev.ModerationResult(
            **envelope,
            event_id=str(uuid.uuid5(ids.NS, f"{turn.request_id}:{attempt}:{stage}:{end}:moderation")),
            request_id=turn.request_id,
            message_id=message_id,
            attempt=attempt,
            direction=direction,
            stage=stage,
            window_start=start,
            window_end=end,
            scores=[ev.CategoryScore(category=c, score=round(s, 4)) for c, s in scores.values.items()] if scores is not None else [],
            categories=categories,
            verdict=verdict,
            action=action,
            model=self.classifier.model,
            policy=turn.tier,
            text=kept,
            latency_ms=round(took * 1000, 3),
        )
        if verdict == "clean":
            return Check(result, [result])
        marked = ev.GenerationModerated(
            **envelope,
            event_id=str(uuid.uuid5(ids.NS, f"{turn.request_id}:moderated")),
            request_id=turn.request_id,
            parent_id=turn.parent_id,
            attempt=attempt,
            direction=direction,
            stage=stage,
            action=action,
            categories=categories,
            result_id=result.event_id,
        )
        out: list[ev.Event] = [result, marked]
        if not ended:  # a reply still running (or not yet started) is stopped; one that ended is only marked
            out.append(ev.GenerationCancelRequested(**envelope, request_id=turn.request_id, reason="moderation"))
        return Check(result, out)


# ------------------------------------------------------------------ a reply's windows


@dataclass
class Windows:
    """Where a reply's checks fall, by its tokens as the chunks count them (pure)."""

    window: int
    overlap: int
    tokens: int = 0  # tokens seen so far
    checked: int = 0  # tokens the checks have reached
    pieces: list[tuple[int, int, str]] = field(default_factory=list)  # (first token, end token, text), oldest first

    def add(self, text: str, tokens: int) -> None:
        if not text:
            return
        start, self.tokens = self.tokens, self.tokens + max(tokens, 1)
        self.pieces.append((start, self.tokens, text))

    def due(self) -> bool:
        return self.tokens - self.checked >= self.window

    def take(self) -> tuple[int, int, str] | None:
        """(start, end, text) of the next check: the unchecked tokens and ``overlap`` before them; None if none."""
        if self.tokens <= self.checked:
            return None
        reach = self.checked - self.overlap
        kept = [p for p in self.pieces if p[1] > reach]
        self.checked = self.tokens
        self.pieces = [p for p in self.pieces if p[1] > self.checked - self.overlap]  # the next check's overlap
        return kept[0][0], self.tokens, "".join(text for _, _, text in kept)


@dataclass
class Reply:
    turn: Turn
    attempt: int
    windows: Windows
    whole: bool  # seen from its first chunk: this instance checks all of it


# ------------------------------------------------------------------ the processor's core


class Moderator:
    """State and events for ``chat.events`` and ``chat.tokens`` (no Kafka in here)."""

    def __init__(
        self,
        checker: Checker,
        load: Callable[[str], Awaitable[Conversation]],
        *,
        window_tokens: int,
        overlap_tokens: int,
        remember: int = 50_000,
        lookup_wait_s: float = 10.0,
    ) -> None:
        if window_tokens < 1 or not 0 <= overlap_tokens < window_tokens:
            raise ValueError("moderation windows need window_tokens ≥ 1 and 0 ≤ overlap_tokens < window_tokens")
        self.checker = checker
        self._load = load
        self._window, self._overlap = window_tokens, overlap_tokens
        self._lookup_wait_s = lookup_wait_s
        self._texts: LRU[str, str] = LRU(remember)  # user message id → text, until its generation is checked
        # tool message ids: a continuation's input is every result of its round (chained one after another)
        self._tool_results: LRU[str, bool] = LRU(remember)
        self._turns: LRU[str, Turn] = LRU(remember)  # request id → the turn
        self._replies: LRU[str, Reply] = LRU(remember)  # request id → its stream, while it runs
        self._ended: LRU[str, bool] = LRU(remember)  # request id → True once checked whole (or flagged)

    # ---------------------------------------------------------------- chat.events

    async def on_event(self, event: ev.Event) -> Sequence[ev.Event]:
        if isinstance(event, ev.MessagePosted):
            if event.role == "user":
                self._texts.put(event.message_id, event.content)
            elif event.role == "tool":  # a tool's result is input too (DESIGN.md §13): its turn's check reads them all
                before = self._texts.get(event.parent_id) if event.parent_id in self._tool_results else None
                self._texts.put(event.message_id, f"{before}\n\n{event.content}" if before else event.content)
                self._tool_results.put(event.message_id, True)
            return ()
        if isinstance(event, ev.GenerationRequested):
            return await self._requested(event)
        if isinstance(event, ev.GenerationCompleted):
            return await self._completed(event)
        return ()

    async def _requested(self, e: ev.GenerationRequested) -> Sequence[ev.Event]:
        turn = Turn(e.conversation_id, e.user_id, e.request_id, e.parent_id, e.tier, e.trace_id, e.org_id)
        self._turns.put(e.request_id, turn)
        running = self._replies.get(e.request_id)
        if running is not None:  # its chunks came first (chat.tokens ran ahead): the rest is checked under its own tier and org
            running.turn = turn
        text = self._texts.get(e.parent_id)
        if text is None:  # a regeneration, or the post came before a restart: the tree has it
            text = await self._stored_text(e.conversation_id, e.parent_id)
        if text is None:
            log.warning("the message a generation answers was not found; its input is not checked", extra=_ids(turn))
            return ()
        check = await self.checker.input(turn, text)
        if check.flagged:
            self._ended.put(e.request_id, True)
        return check.events

    async def _completed(self, e: ev.GenerationCompleted) -> Sequence[ev.Event]:
        reply = self._replies.get(e.request_id)
        if self._ended.get(e.request_id) or (reply is not None and reply.whole):
            return ()  # the token stream's checks cover it (or it is flagged already)
        if e.finish_reason not in ("stop", "length", "cancelled") or not e.content:
            return ()
        turn = self._turns.get(e.request_id)
        if turn is None or not turn.parent_id:
            turn = await self._turn_of(e)
        self._ended.put(e.request_id, True)
        self._replies.pop(e.request_id)
        check = await self.checker.output(
            turn, e.content, attempt=e.attempt, stage="final", start=0, end=e.usage.completion_tokens, ended=True
        )
        return check.events

    # ---------------------------------------------------------------- chat.tokens

    async def on_chunk(self, chunk: ev.TokenChunk) -> Sequence[ev.Event]:
        rid = chunk.request_id
        if self._ended.get(rid):
            return ()
        reply = self._replies.get(rid)
        if reply is not None and chunk.attempt < reply.attempt:
            return ()  # a superseded attempt's late chunk
        if reply is None or chunk.attempt > reply.attempt:
            turn = self._turns.get(rid) or await self._turn_of(chunk)
            # Seen from its first chunk, and (a later attempt) its earlier text seen too: checked here whole.
            whole = chunk.seq == 0 and (chunk.attempt == 0 or (reply is not None and reply.whole))
            reply = Reply(turn, chunk.attempt, Windows(self._window, self._overlap), whole)
            self._replies.put(rid, reply)
        reply.windows.add(chunk.text, chunk.tokens)
        out: list[ev.Event] = []
        last = chunk.finish_reason is not None
        if reply.windows.due() or (last and chunk.finish_reason != "content_filter"):
            taken = reply.windows.take()
            if taken is not None:
                start, end, text = taken
                stage = "final" if last else "window"
                check = await self.checker.output(
                    reply.turn, text, attempt=reply.attempt, stage=stage, start=start, end=end, ended=last
                )
                out.extend(check.events)
                if check.flagged:
                    MODERATION_CUT_SECONDS.observe(max(0.0, time.time() - chunk.occurred_at / 1e6))
                    self._ended.put(rid, True)
        if last or self._ended.get(rid):
            self._replies.pop(rid)
            if last and reply.whole:
                self._ended.put(rid, True)
        return out

    # ---------------------------------------------------------------- lookups after a restart

    async def _stored_text(self, conversation_id: str, message_id: str) -> str | None:
        message = await self._stored_message(conversation_id, message_id)
        return None if message is None else message.content

    async def _turn_of(self, e: ev.TokenChunk | ev.GenerationCompleted) -> Turn:
        """A turn this instance has not seen requested: its parent from the tree (tier unknown: the default's policy)."""
        parent = getattr(e, "parent_id", "") or ""
        if not parent:  # a chunk: its reply's row names the parent (no waiting: the chunk's lane holds others)
            stored = await self._stored_message(e.conversation_id, e.request_id, wait=False)
            parent = (stored.parent_id or "") if stored is not None else ""
        turn = Turn(e.conversation_id, e.user_id, e.request_id, parent, "free", e.trace_id)
        self._turns.put(e.request_id, turn)
        return turn

    async def _stored_message(self, conversation_id: str, message_id: str, *, wait: bool = True) -> Message | None:
        deadline = time.monotonic() + (self._lookup_wait_s if wait else 0.0)
        pause = 0.1
        while True:
            state = await retrying("loading a conversation", lambda: self._load(conversation_id), RETRY_MAX_S)
            message = state.messages.get(message_id)
            if message is not None or time.monotonic() >= deadline:
                return message
            await asyncio.sleep(pause)  # the materializer, beside us on the same log, may not have written it yet
            pause = min(pause * 2, 1.0)


def _ids(turn: Turn) -> dict[str, str]:
    return {"conversation_id": turn.conversation_id, "request_id": turn.request_id}
