"""Usage processor: ``chat.usage`` (UsageRecorded, keyed by user) → Cassandra ``usage_by_request``.

Consumer group ``streams.usage``. Each event becomes one row per generation
attempt (``streams.usage_fold.row_for``), upserted with ``USING TIMESTAMP``
of the event, and the record is acknowledged only once Cassandra took the
write (an outage stalls the fold and loses nothing).

Why rows and not counters: Cassandra counters are not idempotent. Kafka
redelivers whatever was consumed but not committed when a processor dies, and
a counter increment that timed out may or may not have been applied, so no
bookkeeping around counters is exact (marking "applied" before incrementing
loses usage on a crash in between; after, counts it twice). A row keyed by
(user, day, model, request_id, attempt) is rewritten identically by a
redelivered event, so the totals Cassandra sums per partition (``SELECT sum(…)
… GROUP BY model``, one partition per user and UTC day) equal the fold of
the distinct events however often each was delivered. The price is that a
total is computed on read; a day partition holds one small row per generation,
which ``gateway/quotas.py`` and ``GET /v1/usage`` sum server-side.
"""

from __future__ import annotations

import datetime as _dt
from typing import Protocol

from schemas.events import Event, UsageRecorded
from streams.settings import UsageSettings
from streams.store import Store, retrying
from streams.usage_fold import UsageRow, row_for
from streams.wiring import Agent, Wiring, returning_nothing

_INSERT = (
    "INSERT INTO usage_by_request (user_id, day, model, request_id, attempt, conversation_id, pool, finish_reason, "
    "prompt_tokens, cached_tokens, completion_tokens, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "USING TIMESTAMP ?"
)


class UsageWriter(Protocol):
    async def record(self, row: UsageRow) -> None: ...


class UsageStore(Store):
    """The processors' Cassandra session, plus the one write the usage fold makes."""

    async def record(self, row: UsageRow) -> None:
        k = row.key
        recorded_at = _dt.datetime.fromtimestamp(row.occurred_at / 1_000_000, tz=_dt.timezone.utc)
        values = (
            k.user_id, k.day, k.model, k.request_id, k.attempt, row.conversation_id, row.pool, row.finish_reason,
            row.prompt_tokens, row.cached_tokens, row.completion_tokens, recorded_at, row.occurred_at,
        )  # fmt: skip
        await self.run(_INSERT, values)


class UsageFolder:
    """One UsageRecorded → its row, written until Cassandra takes it (no Kafka in here)."""

    def __init__(self, cfg: UsageSettings, store: UsageWriter) -> None:
        self.cfg = cfg
        self._store = store

    async def handle(self, event: Event) -> UsageRow:
        """Raises TypeError for another event type, ValueError for a record no user can be charged for."""
        if not isinstance(event, UsageRecorded):
            raise TypeError(f"unexpected {type(event).__name__} on chat.usage")
        row = row_for(event)
        await retrying("writing a usage row", lambda: self._store.record(row), self.cfg.retry_max_s)
        return row


def wiring(cfg: UsageSettings, store: UsageStore) -> Wiring:
    folder = UsageFolder(cfg, store)
    return Wiring(agents=[Agent("chat.usage", {UsageRecorded: returning_nothing(folder.handle)})])
