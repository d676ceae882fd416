"""Summaries of dropped turns: which one a prompt may use, and which to write.

Pure. A summary stands in for the oldest messages of a branch once the window
(``streams.prompt``) has moved past them. It is written once, by a model, as a
SummaryWritten event on ``chat.events``, and reused on every later turn of the
branch until the window moves again; then a new one extends it with the next
block. Its id derives from the conversation and the range it covers, so the
same range always has the same id (a rewrite after a crash lands on the same
row).

A summary is valid for a branch when every message it covers is on that
branch: an edit that forks the conversation before (or inside) the summarised
part starts a branch without them, and the summary is not used there.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from parley.ids import NS
from schemas import events as ev
from schemas.events import PromptMessage
from streams.context_tokens import TokenCounter
from streams.prompt import Window, summary_message
from streams.tree import Message

INSTRUCTIONS = (
    "You keep a running summary of a conversation for an assistant that can no longer see its older turns. "
    "Keep names, facts, decisions, preferences and open questions; drop pleasantries. "
    "Answer with the updated summary only, in a few short sentences."
)


@dataclass(frozen=True)
class Summary:
    summary_id: str
    #: Last message covered.
    through_message_id: str
    #: Messages folded in, oldest first.
    covered: tuple[str, ...]
    content: str
    tokens: int = 0
    model: str = ""


def summary_id(conversation_id: str, covered: Sequence[str]) -> str:
    """Deterministic in the conversation and the covered range (its first and last message)."""
    return str(uuid.uuid5(NS, f"{conversation_id}:summary:{covered[0]}:{covered[-1]}"))


def from_event(e: ev.SummaryWritten) -> Summary:
    return Summary(e.summary_id, e.through_message_id, tuple(e.covered_message_ids), e.content, e.tokens, e.model)


def with_summary(known: Mapping[str, Summary], s: Summary) -> Mapping[str, Summary]:
    """``known`` plus ``s`` (idempotent: the same id is the same range, so the first one stands)."""
    if s.summary_id in known:
        return known
    return MappingProxyType({**known, s.summary_id: s})


def find(known: Mapping[str, Summary], through_id: str, branch_ids: Collection[str]) -> Summary | None:
    """The summary ending at ``through_id`` valid on the branch; the widest one if several (then by id)."""
    fits = [s for s in known.values() if s.through_message_id == through_id and all(m in branch_ids for m in s.covered)]
    return max(fits, key=lambda s: (len(s.covered), s.summary_id), default=None)


@dataclass(frozen=True)
class Plan:
    """How to get the summary ``window`` needs: extend ``previous`` by each block of ``steps`` in turn."""

    previous: Summary | None
    #: (start, end) indexes into ``window.usable`` of each block still to fold in, oldest first.
    steps: tuple[tuple[int, int], ...]


def plan(window: Window, known: Mapping[str, Summary], max_steps: int) -> Plan:
    """Start from the newest valid summary at a block boundary; fold in the blocks after it.

    When more than ``max_steps`` blocks are missing (a long conversation seen
    for the first time), only the newest ``max_steps`` are summarised: the
    summary engine is not made to read the whole history for one move.
    """
    bounds = window.bounds
    branch_ids = {m.message_id for m in window.usable}
    for j in range(len(bounds) - 1, 0, -1):
        found = find(known, window.usable[bounds[j] - 1].message_id, branch_ids)
        if found is not None:
            break
    else:
        j, found = 0, None
    if len(bounds) - 1 - j > max_steps:
        j, found = len(bounds) - 1 - max_steps, None
    return Plan(found, tuple((bounds[k], bounds[k + 1]) for k in range(j, len(bounds) - 1)))


def request_messages(previous: str | None, block: Sequence[Message]) -> list[PromptMessage]:
    """The summariser's prompt; the writer renders it in the small pool's chat template."""
    lines = [f"{m.role.capitalize()}: {m.content}" for m in block]
    parts = [f"Summary so far:\n{previous}"] if previous else []
    parts.append("Conversation to add:\n" + "\n".join(lines))
    parts.append("Write the updated summary.")
    user = "\n\n".join(parts)
    return [PromptMessage(role="system", content=INSTRUCTIONS), PromptMessage(role="user", content=user)]


def text_budget(counter: TokenCounter, summary_tokens: int) -> int:
    """Tokens the summary's text may take: the reservation less the message's own framing."""
    return max(1, summary_tokens - counter.segment(counter.template.render_message(summary_message(""))))


def clip(text: str, counter: TokenCounter, limit: int) -> str:
    """``text`` cut (at a character, then trimmed) so its summary message fits ``limit`` tokens of text."""
    def size(t: str) -> int:  # not counter.segment: its cache would fill with prefixes
        return counter.count(t) - counter.overhead

    text = text.strip()
    if size(text) <= limit:
        return text
    lo, hi = 0, len(text)  # the longest prefix that fits: counts grow with the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip()


def written(request: ev.GenerationRequested, previous: Summary | None, block: Sequence[Message], content: str, tokens: int, model: str) -> ev.SummaryWritten:
    """The SummaryWritten of ``previous`` extended by ``block``."""
    covered = [*(previous.covered if previous else ()), *(m.message_id for m in block)]
    return ev.SummaryWritten(
        conversation_id=request.conversation_id,
        user_id=request.user_id,
        trace_id=request.trace_id,
        summary_id=summary_id(request.conversation_id, covered),
        through_message_id=covered[-1],
        covered_message_ids=covered,
        content=content,
        tokens=tokens,
        model=model,
    )
