"""What a previous owner of a partition already did with a request: skip it, resume it, or start it.

Offsets of ``chat.inference.<pool>`` are committed only up to the watermark of
finished requests (workers/offsets.py), so when a worker dies (SIGKILL, or a
drain that hands back what it could not finish) its partitions are read again
by another member from that watermark. A redelivered request may have been

* **finished** already: its GenerationCompleted is on ``chat.events`` but the
  watermark lagged. Generating it again would answer the turn twice, so it is
  skipped. The worker commits GenerationCompleted and UsageRecorded in one
  transaction *before* the final TokenChunk (workers/scheduler.py), so a crash
  can fall between them: a missing final chunk (or, in logs written before
  the transactions, a missing UsageRecorded) is produced again, rebuilt from
  the completion, so live readers see their stream end and the usage is
  recorded once.
* **partial**: TokenChunks of it are on ``chat.tokens`` but no completion.
  It is resumed: ``attempt`` one above the highest seen, ``resume_text`` the
  longest prefix of the reply the chunks prove (the engine continues the
  assistant message after it). Readers truncate to the new attempt's first
  ``offset_chars`` and append, so the reply has no duplicated text.
* **unseen**: nothing of it on the log. It still runs as the next attempt,
  from nothing: the previous owner may have streamed chunks that are not on
  the log *yet* (its producer retrying through a broker outage, after the
  group gave its partitions away). Under a new attempt number those late
  chunks are superseded — readers drop them, or truncate them away at the new
  attempt's first chunk — where under the same one a reader would show both
  runs' text one after the other (``bench.chaos`` saw it: Kafka killed while
  a worker settled a reply).

This module is the pure core: ``verdict`` folds a request's earlier records
into one of those. The shell (``HistoryReader``, workers/history_reader.py) finds the records: every one of them is
keyed by conversation (chat.tokens, chat.events) or user (chat.usage), so
``parley.partitioning`` names the one partition of each to read, from the
routed event's ``occurred_at`` minus ``SLACK_S`` (``offsets_for_times``) to
the end offset when the lookup began, outside any consumer group.

Only a *complete* history has a verdict: with part of the log unread, "no
completion in view" does not mean "not finished", and resuming would generate
a finished reply twice. ``verdict`` refuses an incomplete history; the shell
reads on in rounds until it is complete, and a lookup that cannot read on for
long (``GIVE_UP_S``) ends the turn with ``unreadable``: a ``history_unavailable``
error under the next attempt, which readers follow over any earlier attempt,
and no generation and no usage.

Only records that were already in the partition when it was assigned, or
whose turn was asked for before then, can have been started by a previous
owner; workers/intake.py marks those ``inherited``, and only they pay for a
lookup. Fresh traffic pays nothing.

The text a partial attempt proves is rebuilt attempt by attempt, oldest first:
an attempt whose first chunk (seq 0) is at ``offset_chars`` ≤ the text known
so far keeps that much and appends its contiguous chunks; one that starts
beyond the known text leaves it as it is (still a prefix of the reply); one
whose first chunk was not found resets it to nothing (where it began is
unknown). Whatever comes out is a prefix of what every reader was shown, so
resuming from it is always sound, if not always from the very last character.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from schemas.endings import HISTORY_UNAVAILABLE, ending
from schemas.events import Event, GenerationCompleted, InferenceRouted, TokenChunk, UsageRecorded
from workers.outcome import Outcome, terminal_events
from workers.tool_calls import Call

# ------------------------------------------------------------------ verdicts


@dataclass(frozen=True)
class Resume:
    """An earlier attempt streamed ``text`` and stopped: continue after it."""

    attempt: int  # the new attempt: one above the highest seen (or routed)
    text: str  # the reply so far, to continue from ("" when nothing of it was seen)
    tokens: int  # tokens the chunks of ``text`` carried (counted into the completion's usage)


@dataclass(frozen=True)
class Finished:
    """Nothing to generate: it ended already, or ``unreadable`` ends it now; ``missing`` are the closing
    events to produce, in order (often none)."""

    missing: tuple[Event, ...] = ()


Verdict = Resume | Finished


@dataclass(frozen=True)
class History:
    """A request's records from the topics its closing events go to."""

    chunks: tuple[TokenChunk, ...] = ()
    completions: tuple[GenerationCompleted, ...] = ()
    usage: tuple[UsageRecorded, ...] = ()
    complete: bool = True  # False: part of the log is not read yet (no verdict until it is)


class IncompleteHistory(ValueError):
    """``verdict`` was asked of a history read only in part."""


# ------------------------------------------------------------------ the pure core


def verdict(routed: InferenceRouted, history: History) -> Verdict:
    """What to do with a redelivered ``routed`` given what earlier attempts left on the log (all of it)."""
    if not history.complete:
        raise IncompleteHistory("a redelivered request's history was read only in part: read on, never resume")
    rid = routed.request.request_id
    chunks = [c for c in history.chunks if c.request_id == rid]
    completions = [c for c in history.completions if c.request_id == rid]
    if completions:
        return Finished(_missing(routed, max(completions, key=lambda c: c.attempt), chunks, history.usage))
    if any(c.finish_reason is not None for c in chunks):
        return Finished()  # its completion was acknowledged before this chunk was produced
    text, tokens = known_text(chunks)
    return Resume(attempt=_next_attempt(routed, chunks), text=text, tokens=tokens)


def unreadable(routed: InferenceRouted, history: History) -> Finished:
    """``routed``'s turn ended ``history_unavailable``: what it did before could not be read, so it is
    neither resumed nor skipped. Under the next attempt (of what was read), so readers end the stream there."""
    rid = routed.request.request_id
    request = replace(routed.request, attempt=_next_attempt(routed, [c for c in history.chunks if c.request_id == rid]))
    message = "the worker that took this turn over could not read what the previous one had done"
    return Finished(tuple(ending(request, "failed", HISTORY_UNAVAILABLE, message, pool=routed.pool, model=routed.model)))


def _next_attempt(routed: InferenceRouted, chunks: Iterable[TokenChunk]) -> int:
    """One above the highest attempt routed or seen: readers drop or truncate away every earlier one."""
    return max([routed.request.attempt, *(c.attempt for c in chunks)]) + 1


def known_text(chunks: Iterable[TokenChunk]) -> tuple[str, int]:
    """The longest prefix of the reply the text chunks prove, and the tokens they carried (see the docstring)."""
    by_attempt: dict[int, dict[int, TokenChunk]] = defaultdict(dict)
    for c in chunks:
        if c.finish_reason is None:
            by_attempt[c.attempt][c.seq] = c
    text = ""
    marks: list[tuple[int, int]] = []  # (characters, tokens) after each chunk kept
    for attempt in sorted(by_attempt):
        seqs = by_attempt[attempt]
        first = seqs.get(0)
        if first is None:
            text, marks = "", []
            continue
        if first.offset_chars > len(text):
            continue
        text = text[: first.offset_chars]
        marks = [m for m in marks if m[0] <= len(text)]
        seq = 0
        while (c := seqs.get(seq)) is not None and c.offset_chars == len(text):
            text += c.text
            marks.append((len(text), (marks[-1][1] if marks else 0) + c.tokens))
            seq += 1
    return text, marks[-1][1] if marks else 0


def _missing(
    routed: InferenceRouted,
    completed: GenerationCompleted,
    chunks: Sequence[TokenChunk],
    usage: Sequence[UsageRecorded],
) -> tuple[Event, ...]:
    """The final chunk and UsageRecorded of ``completed``'s attempt, those not on the log yet."""
    mine = [c for c in chunks if c.attempt == completed.attempt]
    has_final = any(c.finish_reason is not None for c in mine)
    has_usage = any(u.request_id == completed.request_id and u.attempt == completed.attempt for u in usage)
    if has_final and has_usage:
        return ()
    request = replace(routed.request, attempt=completed.attempt, resume_text="")
    outcome = Outcome(
        finish_reason=completed.finish_reason,
        text=completed.content,
        usage=completed.usage,
        error_code=completed.error_code,
        error_message=completed.error_message,
        tool_calls=tuple(Call(c.name, c.arguments) for c in completed.tool_calls),
    )
    _, final, recorded = terminal_events(
        replace(routed, request=request),
        outcome,
        seq=max((c.seq for c in mine), default=-1) + 1,
        offset_chars=len(completed.content),
        replica=completed.replica,
        model=completed.model,
        queue_ms=0.0,  # timings of the dead attempt are lost with it
    )
    # The scheduler settles them as it closes a live request: any usage committed, then the final chunk.
    return tuple(e for e, missing in ((final, not has_final), (recorded, not has_usage)) if missing)
