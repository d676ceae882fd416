"""The turn record: what one generation was, folded from the events of five topics (pure).

A turn is one ``request_id`` (the assistant message id). Its pieces, joined by request id:

============================  =====================  ============================================
event                         topic                  what it gives the turn
============================  =====================  ============================================
MessagePosted                 chat.events            the user message (text, parent, client id)
GenerationRequested           chat.events            when it was asked for, tier, regenerate or not, experiment arm
InferenceRequested            chat.inference         the prompt as the context builder built it
InferenceRouted               chat.inference.<pool>  pool, model, partition, route reason, downgrade
GenerationCompleted           chat.events            finish reason, error code, reply text, attempt
GenerationModerated           chat.events            moderation withdrew it: content_filter, the notice
UsageRecorded                 chat.usage             tokens (cached too), replica, TTFT, queue, duration
ToolCallDecided               chat.events            each call of Parley's tools the reply made: the broker's word
ToolCallStarted, …Finished    chat.events            whether it started, how it ended (no arguments, no result)
FeedbackGiven                 chat.events            the owner's rating of the reply, the last one standing
============================  =====================  ============================================

The fold does not depend on the order records arrive in (topics are read side by side) and
keeps the first copy of an event delivered twice, so the same log always gives the same turns.
A shed turn has no InferenceRouted and no UsageRecorded: the router ended it with
GenerationCompleted ``rejected`` / ``overloaded``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from parley import ids
from schemas import events as ev
from schemas.endings import FILTERED_NOTICE, OVERLOADED
from schemas.catalog import POOLS
from schemas.records import to_record
from tools.analysts.records import Head

Record = dict[str, Any]

#: The topics a replay reads (catalog names), in the order the docs list them.
TOPICS: tuple[str, ...] = ("chat.events", "chat.inference", *(f"chat.inference.{p}" for p in POOLS), "chat.usage")

#: The event types the fold uses; a reader may skip every other record undecoded.
NEEDED: frozenset[str] = frozenset(
    t.__name__
    for t in (
        ev.MessagePosted,
        ev.GenerationRequested,
        ev.InferenceRequested,
        ev.InferenceRouted,
        ev.GenerationCompleted,
        ev.GenerationModerated,
        ev.UsageRecorded,
        ev.ToolCallDecided,
        ev.ToolCallStarted,
        ev.ToolCallFinished,
        ev.FeedbackGiven,
    )
)

@dataclass(frozen=True)
class Turn:
    """One generation as the log tells it; every field derives from the events above."""

    request_id: str  # the assistant message id
    conversation_id: str
    user_id: str
    kind: str  # message (answers a fresh post) | regenerate (another reply to an earlier message) | tool-results
    # (the broker's continuation, after the calls of the reply before it)
    tier: str
    org_id: str  # the user's organisation ("": asked for before organisations existed)
    requested_at: int  # µs: GenerationRequested.occurred_at
    completed_at: int | None  # µs: GenerationCompleted.occurred_at; None while it is still open
    user_message_id: str
    user_message: str | None  # its text; None when its MessagePosted lies outside what was read
    user_parent_id: str | None  # the message the user message follows (an edit shares it with the original)
    prompt: list[dict[str, str]]  # the built prompt, [{role, content}, …]
    prompt_tokens_estimate: int  # the context builder's estimate
    budget_tokens: int
    max_tokens: int
    requested_model: str | None  # the model the user named, if any
    pool: str
    model: str
    replica: str
    partition: int | None  # partition of chat.inference.<pool> the router chose
    route_reason: str
    downgraded_from: str | None
    finish_reason: str | None  # None: no GenerationCompleted yet
    error_code: str | None
    attempts: int  # 1 + the highest attempt seen
    content: str  # the reply text
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cache: str | None  # hit (cached_tokens > 0) | miss | None (never reached an engine)
    cache_ratio: float | None  # cached / prompt tokens
    ttft_ms: float | None
    queue_ms: float | None
    duration_ms: float | None
    tokens_per_s: float | None  # completion tokens / duration
    shed: bool  # rejected as overloaded by admission control
    downgraded: bool
    # Each call of Parley's tools the reply made, by call id: {id, name, decision, rule, started, outcome, error}
    # (never its arguments or result: they are the user's text, sealed on the log).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # The owner's rating of the reply (FeedbackGiven), the last one standing: up | down | None (none, or taken
    # back). Never its reason: the user's text, sealed on the log.
    feedback: str | None = None
    # The experiment and arm the gateway assigned the turn to (GenerationRequested.experiment); None: in none.
    experiment: str | None = None
    arm: str | None = None

    def to_record(self) -> dict[str, Any]:
        # Shallow on purpose (asdict deep-copies): the prompt's dicts are this turn's own.
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = tuple(f.name for f in fields(Turn))


@dataclass
class _Parts:
    # Each event as its record (``schemas.records.to_record``'s dict, or ``records.Decoder``'s).
    requested: Record | None = None
    inference: dict[int, Record] = field(default_factory=dict)
    routed: dict[int, Record] = field(default_factory=dict)
    completed: dict[int, Record] = field(default_factory=dict)
    usage: dict[int, Record] = field(default_factory=dict)
    moderated: Record | None = None
    tool_decided: dict[str, Record] = field(default_factory=dict)  # call id → ToolCallDecided
    tool_started: set[str] = field(default_factory=set)
    tool_finished: dict[str, Record] = field(default_factory=dict)  # call id → ToolCallFinished
    feedback: Record | None = None  # the last FeedbackGiven


def _first(current: Record | None, new: Record) -> Record:
    """Of two copies of one fact, the earlier (ties by event id): independent of arrival order."""
    if current is None or (new["occurred_at"], new["event_id"]) < (current["occurred_at"], current["event_id"]):
        return new
    return current


class TurnFold:
    """Folds logged events into turns; ``turns()`` finalises them.

    It keeps each event's record, not the event: ``add_record`` takes one straight from the
    bytes (``tools.analysts.records.Decoder``), so a replay never builds the event objects;
    ``add`` takes an event and keeps its record.
    """

    def __init__(self, whole: Callable[[Head], Record | None] | None = None) -> None:
        self._parts: dict[str, _Parts] = {}
        self._posted: dict[str, Record] = {}
        # The rest of a record added as its head only (``records.Head``); None: it does not read (it is
        # then left out, as an undecodable record is).
        self._whole = whole

    def _of(self, request_id: str) -> _Parts:
        parts = self._parts.get(request_id)
        if parts is None:
            parts = self._parts[request_id] = _Parts()
        return parts

    def add(self, event: ev.Event) -> None:
        add = _ADD.get(type(event).__name__)
        if add is not None:
            add(self, to_record(event))

    def add_record(self, name: str, record: Record) -> None:
        """An event of type ``name`` as its record (the types of ``NEEDED``; others are ignored)."""
        add = _ADD.get(name)
        if add is not None:
            add(self, record)

    def _add_posted(self, r: Record) -> None:
        mid = r["message_id"]
        self._posted[mid] = _first(self._posted.get(mid), r)

    def _add_requested(self, r: Record) -> None:
        parts = self._of(r["request_id"])
        parts.requested = _first(parts.requested, r)

    def _add_inference(self, r: Record) -> None:
        _keep(self._of(r["request_id"]).inference, r["attempt"], r)

    def _add_routed(self, r: Record) -> None:
        request = r["request"]
        _keep(self._of(request["request_id"]).routed, request["attempt"], r)

    def _add_completed(self, r: Record) -> None:
        _keep(self._of(r["request_id"]).completed, r["attempt"], r)

    def _add_moderated(self, r: Record) -> None:
        parts = self._of(r["request_id"])
        parts.moderated = _first(parts.moderated, r)

    def _add_usage(self, r: Record) -> None:
        _keep(self._of(r["request_id"]).usage, r["attempt"], r)

    def _add_tool_decided(self, r: Record) -> None:
        decided = self._of(r["request_id"]).tool_decided
        decided[r["call"]["id"]] = _first(decided.get(r["call"]["id"]), r)

    def _add_tool_started(self, r: Record) -> None:
        self._of(r["request_id"]).tool_started.add(r["call_id"])

    def _add_tool_finished(self, r: Record) -> None:
        finished = self._of(r["request_id"]).tool_finished
        finished[r["call_id"]] = _first(finished.get(r["call_id"]), r)

    def _add_feedback(self, r: Record) -> None:
        parts = self._of(r["message_id"])  # the reply rated: its request id
        if parts.feedback is None or (r["occurred_at"], r["event_id"]) > (parts.feedback["occurred_at"], parts.feedback["event_id"]):
            parts.feedback = r  # the last word stands (ties by event id: independent of arrival order)

    def _complete(self, by_attempt: dict[int, Record]) -> None:
        """Each head among ``by_attempt`` replaced by its whole record, or dropped when that does not read."""
        for attempt, record in list(by_attempt.items()):
            if isinstance(record, Head):
                whole = self._whole(record) if self._whole is not None else None
                if whole is None:
                    del by_attempt[attempt]
                else:
                    by_attempt[attempt] = whole

    def turns(
        self,
        since_us: int | None = None,
        until_us: int | None = None,
        conversation_id: str | None = None,
        user_id: str | None = None,
        org_id: str | None = None,
    ) -> list[Turn]:
        """Turns asked for in [since, until), oldest first (ties by request id)."""
        out = []
        for request_id, parts in self._parts.items():
            req = parts.requested
            if req is None:  # asked for before what was read
                continue
            if since_us is not None and req["occurred_at"] < since_us:
                continue
            if until_us is not None and req["occurred_at"] >= until_us:
                continue
            if conversation_id is not None and req["conversation_id"] != conversation_id:
                continue
            if user_id is not None and req["user_id"] != user_id:
                continue
            if org_id is not None and (req.get("org_id") or "") != org_id:
                continue
            if not parts.routed:  # the prompt comes from InferenceRequested itself
                self._complete(parts.inference)
            out.append(_turn(request_id, req, parts, self._posted.get(req["parent_id"])))
        out.sort(key=lambda t: (t.requested_at, t.request_id))
        return out


#: How each type of ``NEEDED`` is folded in (unbound: a table of bound methods would make every fold a
#: reference cycle, left with all its records to the cyclic collector).
_ADD: dict[str, Callable[[TurnFold, Record], None]] = {
    "MessagePosted": TurnFold._add_posted,
    "GenerationRequested": TurnFold._add_requested,
    "InferenceRequested": TurnFold._add_inference,
    "InferenceRouted": TurnFold._add_routed,
    "GenerationCompleted": TurnFold._add_completed,
    "GenerationModerated": TurnFold._add_moderated,
    "UsageRecorded": TurnFold._add_usage,
    "ToolCallDecided": TurnFold._add_tool_decided,
    "ToolCallStarted": TurnFold._add_tool_started,
    "ToolCallFinished": TurnFold._add_tool_finished,
    "FeedbackGiven": TurnFold._add_feedback,
}


def _keep(by_attempt: dict[int, Record], attempt: int, record: Record) -> None:
    by_attempt[attempt] = _first(by_attempt.get(attempt), record)


def fold(events: Iterable[ev.Event], **window: Any) -> list[Turn]:
    """The turns of ``events`` (see ``TurnFold.turns`` for the window)."""
    f = TurnFold()
    for event in events:
        f.add(event)
    return f.turns(**window)


def kind_of(req: Record) -> str:
    """A post derives the user message id from the same client id as the reply; a regenerate does not; the
    tool broker's continuation has a key of its own (``tool:``)."""
    if req["client_message_id"].startswith("tool:"):
        return "tool-results"
    fresh = ids.user_message_id(req["conversation_id"], req["client_message_id"]) == req["parent_id"]
    return "message" if fresh else "regenerate"


_NO_USAGE: Record = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}


def _turn(request_id: str, req: Record, p: _Parts, posted: Record | None) -> Turn:
    attempts = [*p.inference, *p.routed, *p.completed, *p.usage]
    final = max(p.completed) if p.completed else max(attempts, default=0)
    done = p.completed.get(final)
    routed = p.routed.get(final) or (p.routed[max(p.routed)] if p.routed else None)
    built = routed["request"] if routed is not None else p.inference.get(final) or (
        p.inference[max(p.inference)] if p.inference else None
    )
    usage_event = p.usage.get(final)
    counts = usage_event["usage"] if usage_event is not None else (done["usage"] if done is not None else _NO_USAGE)
    prompt_tokens, cached_tokens, completion_tokens = counts["prompt_tokens"], counts["cached_tokens"], counts["completion_tokens"]
    reached_engine = usage_event is not None or (done is not None and prompt_tokens > 0)
    duration = usage_event["duration_ms"] if usage_event is not None else None
    return Turn(
        request_id=request_id,
        conversation_id=req["conversation_id"],
        user_id=req["user_id"],
        kind=kind_of(req),
        tier=req["tier"],
        org_id=req.get("org_id") or "",
        requested_at=req["occurred_at"],
        completed_at=done["occurred_at"] if done is not None else None,
        user_message_id=req["parent_id"],
        user_message=posted["content"] if posted is not None else None,
        user_parent_id=posted["parent_id"] if posted is not None else None,
        prompt=[{"role": m["role"], "content": m["content"]} for m in built["messages"]] if built is not None else [],
        prompt_tokens_estimate=built["prompt_tokens"] if built is not None else 0,
        budget_tokens=built["budget_tokens"] if built is not None else 0,
        max_tokens=built["max_tokens"] if built is not None else (req["max_tokens"] or 0),
        requested_model=(built["model"] if built is not None else req["model"]) or None,
        pool=(routed["pool"] if routed else "") or (done["pool"] if done else "") or (usage_event["pool"] if usage_event else ""),
        model=(routed["model"] if routed else "") or (done["model"] if done else "") or (usage_event["model"] if usage_event else ""),
        replica=(usage_event["replica"] if usage_event else "") or (done["replica"] if done else ""),
        partition=routed["partition"] if routed is not None else None,
        route_reason=routed["route_reason"] if routed is not None else "",
        downgraded_from=routed["downgraded_from"] if routed is not None else None,
        # A verdict withdraws the reply whatever its own ending said (streams/projection.py does the same).
        finish_reason="content_filter" if p.moderated is not None else done["finish_reason"] if done is not None else None,
        error_code=done["error_code"] if done is not None else None,
        attempts=max(attempts, default=0) + 1,
        content=FILTERED_NOTICE if p.moderated is not None else done["content"] if done is not None else "",
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=completion_tokens,
        cache=("hit" if cached_tokens > 0 else "miss") if reached_engine else None,
        cache_ratio=round(cached_tokens / prompt_tokens, 6) if reached_engine and prompt_tokens else None,
        ttft_ms=usage_event["ttft_ms"] if usage_event is not None else None,
        queue_ms=usage_event["queue_ms"] if usage_event is not None else None,
        duration_ms=duration,
        tokens_per_s=round(completion_tokens / (duration / 1000), 6) if duration else None,
        shed=done is not None and done["finish_reason"] == "rejected" and done["error_code"] == OVERLOADED,
        downgraded=routed is not None and routed["downgraded_from"] is not None,
        tool_calls=_tool_calls(p),
        feedback=(p.feedback["rating"] or None) if p.feedback is not None else None,
        experiment=req["experiment"]["experiment"] if req.get("experiment") else None,
        arm=req["experiment"]["arm"] if req.get("experiment") else None,
    )


def _tool_calls(p: _Parts) -> list[dict[str, Any]]:
    out = []
    for call_id in sorted({*p.tool_decided, *p.tool_started, *p.tool_finished}):
        decided, finished = p.tool_decided.get(call_id), p.tool_finished.get(call_id)
        out.append({
            "id": call_id,
            "name": decided["call"]["name"] if decided else finished["name"] if finished else "",
            "decision": decided["decision"] if decided else None,
            "rule": decided["rule"] if decided else None,
            "started": call_id in p.tool_started,
            "outcome": finished["outcome"] if finished else None,
            "error": (finished["error"] or None) if finished else None,
        })  # fmt: skip
    return out
