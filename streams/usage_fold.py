"""Usage as a fold: UsageRecorded events → one row per generation attempt → totals per user, day and model.

This is the whole meaning of the usage tables, as plain functions. The usage
processor (``streams/usage.py``) writes ``row_for(event)`` to
``usage_by_request``; Cassandra sums a partition the way ``totals`` does. The
row's key is (user, UTC day, model, request_id, attempt), and a later event
for the same key replaces the earlier (Cassandra's ``USING TIMESTAMP`` of the
event's ``occurred_at``): a redelivered event lands on its own row again, so
redelivery, replay and duplicates leave the totals as they were.

A generation resumed after a failure raises ``attempt`` and is a row of its
own: it used the engine again, so it counts again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timezone

from schemas.events import UsageRecorded

#: What a row's model is when the event names neither a model nor a pool.
UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True)
class UsageKey:
    """The primary key of a usage row: at most one row per key."""

    user_id: str
    day: date  # UTC
    model: str
    request_id: str
    attempt: int


@dataclass(frozen=True)
class UsageRow:
    key: UsageKey
    conversation_id: str
    pool: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    occurred_at: int  # µs since the epoch; the write's timestamp, so the latest event for a key wins


@dataclass(frozen=True)
class Totals:
    """Sums over the rows of one user, day and model."""

    requests: int = 0  # generation attempts
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """What a tokens/day quota counts: prompt (cached included) plus completion, as OpenAI's ``total_tokens``."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.requests + other.requests,
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.completion_tokens + other.completion_tokens,
        )


def utc_day(occurred_at_us: int) -> date:
    return datetime.fromtimestamp(occurred_at_us / 1_000_000, tz=timezone.utc).date()


def row_for(event: UsageRecorded) -> UsageRow:
    """The row ``event`` writes. Raises ValueError when it cannot be attributed to a user."""
    if not event.user_id:
        raise ValueError("UsageRecorded without user_id")
    if not event.request_id:
        raise ValueError("UsageRecorded without request_id")
    usage = event.usage
    if min(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) < 0:
        raise ValueError("UsageRecorded with a negative token count")
    return UsageRow(
        key=UsageKey(
            user_id=event.user_id,
            day=utc_day(event.occurred_at),
            model=event.model or event.pool or UNKNOWN_MODEL,
            request_id=event.request_id,
            attempt=event.attempt,
        ),
        conversation_id=event.conversation_id,
        pool=event.pool,
        finish_reason=event.finish_reason,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=usage.completion_tokens,
        occurred_at=event.occurred_at,
    )


def latest_rows(events: Iterable[UsageRecorded]) -> dict[UsageKey, UsageRow]:
    """The table after ``events`` in any order: one row per key, the latest ``occurred_at`` winning.

    The same event twice is the same row. Two different events with the same
    key and timestamp (not produced in practice) merge as Cassandra merges
    them: each cell keeps the larger value.
    """
    rows: dict[UsageKey, UsageRow] = {}
    for event in events:
        row = row_for(event)
        held = rows.get(row.key)
        if held is None or row.occurred_at > held.occurred_at:
            rows[row.key] = row
        elif row.occurred_at == held.occurred_at and row != held:
            rows[row.key] = _merge(held, row)
    return rows


def _merge(a: UsageRow, b: UsageRow) -> UsageRow:
    return UsageRow(
        key=a.key,
        conversation_id=max(a.conversation_id, b.conversation_id),
        pool=max(a.pool, b.pool),
        finish_reason=max(a.finish_reason, b.finish_reason),
        prompt_tokens=max(a.prompt_tokens, b.prompt_tokens),
        cached_tokens=max(a.cached_tokens, b.cached_tokens),
        completion_tokens=max(a.completion_tokens, b.completion_tokens),
        occurred_at=a.occurred_at,
    )


def totals(rows: Iterable[UsageRow]) -> dict[tuple[str, date, str], Totals]:
    """Sums per (user, day, model), what ``GROUP BY model`` over a user's day partition returns."""
    out: dict[tuple[str, date, str], Totals] = {}
    for row in rows:
        k = (row.key.user_id, row.key.day, row.key.model)
        out[k] = out.get(k, Totals()) + Totals(1, row.prompt_tokens, row.cached_tokens, row.completion_tokens)
    return out


def fold(events: Iterable[UsageRecorded]) -> dict[tuple[str, date, str], Totals]:
    """Events → totals per user, day and model; the same for any number of redeliveries."""
    return totals(latest_rows(events).values())
