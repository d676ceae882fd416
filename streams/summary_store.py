"""Summaries as the materializer stored them (``summaries`` table): what a context
builder that has not seen a conversation's SummaryWritten events (a restart, an
evicted conversation) starts from.

Reads go through the processor's ``Store``; driver errors become
``StoreUnavailable``, which the builder retries like any other load.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from schemas.sealing import cell_at, open_text
from streams.store import Store
from streams.summary import Summary

_SELECT = (
    "SELECT summary_id, through_message_id, covered_ids, covered_message_ids, content, tokens, model "
    "FROM summaries WHERE conversation_id = ?"
)


def summaries_from_rows(rows: Iterable[Any]) -> list[Summary]:
    """Rows (anything with the selected attributes) → summaries; a row the projection left incomplete is skipped."""
    out = []
    for r in rows:
        # covered_ids since schemas/cql/0008; rows written before it have only the old column,
        # whose duplicates (it grew on rewrites) are dropped keeping the first of each.
        ids = r.covered_ids if getattr(r, "covered_ids", None) else list(dict.fromkeys(r.covered_message_ids or ()))
        if r.through_message_id is None or not ids or r.content is None:
            continue
        covered = tuple(str(m) for m in ids)
        content = open_text(r.content, at=cell_at("summaries", "content", r.summary_id))
        out.append(Summary(r.summary_id, str(r.through_message_id), covered, content, r.tokens or 0, r.model or ""))
    return out


class SummaryRows:
    """Loads a conversation's summaries from Cassandra."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def summaries(self, conversation_id: str) -> list[Summary]:
        rows = await self._store.run(_SELECT, (uuid.UUID(conversation_id),))
        return summaries_from_rows(rows)
