"""Usage processor: ``chat.usage`` (UsageRecorded, keyed by user) → Cassandra ``usage_by_request``
(the write itself: ``streams/store.py UsageStore``).

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

from typing import Protocol

from parley.retry import retrying
from schemas.events import Event, UsageRecorded
from streams.settings import UsageSettings
from streams.usage_fold import UsageRow, row_for


class UsageWriter(Protocol):
    async def record(self, row: UsageRow) -> None: ...


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
