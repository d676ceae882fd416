"""A turn's document search: which of its documents can be searched, the passages found, what to tell the model.

The context builder asks this for a turn whose branch names documents
(``MessagePosted.document_ids``). It reads each document's status row, owner
scoped (another user's id is "missing", never searched), searches the pages
that are ready — progressive indexing: a document still processing is
searched as far as it has gone — and returns an ``ev.Retrieval``: the path
that answered (hybrid, or keyword alone when semantic search is down), the
passages within their token budget, and a plain note of coverage ("pages 1–12
of 150 indexed") that the prompt and the reply's metadata both carry.

Nothing here fails a turn: statuses unreadable or both searches down give a
Retrieval with no passages and a note saying so, and the turn is answered
without them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from documents.hits import Hit, Scope
from documents.retrieval import Retrieved
from documents.status import FAILED, PROCESSING, READY
from moderation.injection import detect
from parley.errors import Unavailable
from parley.metrics import INJECTION_FLAGS
from schemas import events as ev

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Status:
    """What the builder needs of a ``documents`` row."""

    document_id: str
    filename: str
    status: str  # processing | ready | failed
    pages_ready: int
    pages_total: int


class Statuses(Protocol):
    async def statuses(self, user_id: str, document_ids: Sequence[str]) -> dict[str, Status]: ...


class Search(Protocol):
    async def retrieve(self, query: str, scopes: Sequence[Scope], limit: int) -> Retrieved: ...


def coverage(document_ids: Sequence[str], found: dict[str, Status]) -> list[ev.DocumentCoverage]:
    out = []
    for d in document_ids:
        s = found.get(d)
        if s is None:
            out.append(ev.DocumentCoverage(document_id=d, status="missing"))
        else:
            out.append(
                ev.DocumentCoverage(
                    document_id=d, filename=s.filename, status=s.status, pages_ready=s.pages_ready, pages_total=s.pages_total
                )
            )
    return out


def note(documents: Sequence[ev.DocumentCoverage]) -> str:
    """One line per document not wholly searchable; empty when every document is."""
    lines = []
    for d in documents:
        name = d.filename or d.document_id
        if d.status == PROCESSING:
            of = f" of {d.pages_total}" if d.pages_total else ""
            if d.pages_ready:
                lines.append(f"{name}: pages 1–{d.pages_ready}{of} indexed; the rest is still being processed.")
            else:
                lines.append(f"{name}: still being processed; no page is searchable yet.")
        elif d.status == FAILED:
            lines.append(f"{name}: could not be processed; it was not searched.")
        elif d.status == "missing":
            lines.append(f"{name}: not available (deleted, or not yours); it was not searched.")
    return "\n".join(lines)


def label(hit: Hit) -> str:
    return f"[{hit.filename or hit.document_id[:8]} p.{hit.page}]"


def within_budget(hits: Sequence[Hit], budget_tokens: int, count: Callable[[str], int]) -> list[Hit]:
    """The best-ranked hits whose text fits the budget, in rank order (a hit too long for what is left is skipped)."""
    out, used = [], 0
    for h in hits:
        cost = count(h.text) + 12  # the label and quoting around it
        if used + cost <= budget_tokens:
            out.append(h)
            used += cost
    return out


def in_prompt_order(hits: Sequence[Hit], document_ids: Sequence[str]) -> list[Hit]:
    """Deterministic order for the prompt: by document as the turn listed them, then page, then place on the page.
    The same passages render the same bytes whatever order the search ranked them in."""
    rank = {d: i for i, d in enumerate(document_ids)}
    return sorted(hits, key=lambda h: (rank.get(h.document_id, len(rank)), h.page, h.ordinal, h.chunk_id))


class DocumentSearch:
    def __init__(
        self, statuses: Statuses, search: Search, *, passages: int, passage_tokens: int, count: Callable[[str], int]
    ) -> None:
        self._statuses = statuses
        self._search = search
        self._passages = passages
        self._budget = passage_tokens
        self._count = count

    async def search(self, user_id: str, document_ids: Sequence[str], query: str) -> ev.Retrieval:
        started = time.monotonic()
        try:
            found = await self._statuses.statuses(user_id, document_ids)
        except Unavailable as exc:
            log.warning("document statuses unreadable; the turn goes on without its documents", extra={"error": type(exc).__name__})  # fmt: skip
            docs = [ev.DocumentCoverage(document_id=d, status="missing") for d in document_ids]
            return ev.Retrieval(path="none", documents=docs, note="The documents could not be searched just now.")
        docs = coverage(document_ids, found)
        scopes = [
            Scope(document_id=s.document_id, max_page=s.pages_ready, filename=s.filename, user_id=user_id)
            for s in (found.get(d) for d in document_ids)
            if s is not None and s.status in (READY, PROCESSING) and s.pages_ready > 0
        ]
        told = note(docs)
        if not scopes:
            return ev.Retrieval(path="none", documents=docs, note=told, latency_ms=_ms(started))
        try:
            retrieved = await self._search.retrieve(query, scopes, self._passages)
        except Exception as exc:  # both searches down: answer without passages, and say so
            log.warning("document search failed; the turn goes on without passages", extra={"error": type(exc).__name__})
            told = "\n".join(filter(None, [told, "The documents could not be searched just now."]))
            return ev.Retrieval(path="none", documents=docs, note=told, latency_ms=_ms(started))
        kept = in_prompt_order(within_budget(retrieved.hits, self._budget, self._count), document_ids)
        passages = [
            ev.Passage(
                label=label(h),
                document_id=h.document_id,
                chunk_id=h.chunk_id,
                page=h.page,
                text=h.text,
                char_start=h.char_start,
                filename=h.filename,
                injection=injection_rule(h.text),
            )
            for h in kept
        ]
        injections = [
            ev.InjectionFlag(document_id=p.document_id, chunk_id=p.chunk_id, page=p.page, rule=p.injection)
            for p in passages
            if p.injection
        ]
        return ev.Retrieval(
            path=retrieved.path, documents=docs, passages=passages, note=told, latency_ms=_ms(started), injections=injections
        )


def injection_rule(text: str) -> str:
    """The prompt-injection rule a passage matches ('' for none; moderation/injection.py), counted by rule."""
    found = detect(text)
    if found is None:
        return ""
    INJECTION_FLAGS.labels(found.rule).inc()
    return found.rule


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 2)
