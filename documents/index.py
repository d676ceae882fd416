"""The document index in Cassandra: the document worker writes pages, the context builder searches them.

Tables (schemas/cql/0009_documents.cql), all keyed by document:
``document_pages`` (a page's text, what a citation opens), ``document_page_stats``
(chunks and summed term lengths per page: BM25's N and avgdl),
``document_chunks`` (provenance, text, embedding; SAI ANN) and
``document_postings`` (term → chunk, tf).

Progressive indexing: a search names, per document, the last page it may
serve (``Scope.max_page``, the ready mark of the document's status row); a
chunk of a later page never counts, neither in the ranking nor in BM25's
statistics. Every read fans out in parallel; the keyword search is three
round trips deep (postings, chunk lengths and pages, the winners' text).

Its types (``Scope``, ``Hit``, ``PageRow``, ``ChunkLike``) live in the core
``documents.hits`` so that cores can name them without loading the driver.

Errors: Cassandra's become ``parley.errors.StoreUnavailable`` (``AsyncCql``).
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from cassandra import ConsistencyLevel

from documents.hits import ChunkLike, Hit, PageRow, Scope
from documents.terms import terms
from parley.cassandra import AsyncCql
from schemas.sealing import ERASED, blind, cell_at, open_text, seal

#: BM25's parameters (the usual ones: Lucene's, bm25s's defaults).
K1 = 1.2
B = 0.75
#: Cassandra's ceiling on an ANN query's LIMIT.
ANN_LIMIT_MAX = 1000
#: Chunk ids per ``IN (...)`` read: one coordinator request each, so a common term's hundreds of chunks are split.
IN_GROUP = 100
#: Writes in flight at once for one page (postings are one partition per term: hundreds per page).
WRITES_IN_FLIGHT = 64

T = TypeVar("T")

__all__ = ["ChunkLike", "DocumentIndex", "Hit", "PageRow", "Scope"]


class DocumentIndex:
    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    # ------------------------------------------------------------------ writes (document worker)

    async def write_page(
        self,
        document_id: str,
        number: int,
        text: str,
        method: str,
        chunks: Sequence[ChunkLike],
        vectors: Sequence[Sequence[float]] | None,
        user_id: str,
    ) -> None:
        """Index one page: its chunks (with their embeddings when given) and postings, then its stats and text.

        The page and stats rows go last, in one mutation: they mark the page written
        (``pages_written``), so a worker killed mid-page rewrites it on resume. A
        rewrite overwrites the same rows (chunk ids are deterministic); chunks and
        postings the page had before and no longer has (another chunker's cut) are
        deleted first, so a rewrite leaves exactly the rows a first write would. (A
        page a killed worker left half-written has no stats row yet: the same chunker
        rewrites the same ids over it.) Text is sealed and terms blinded for
        ``user_id``, the owner (DESIGN.md §12).
        """
        if vectors is not None and len(vectors) != len(chunks):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors for page {number}")
        doc = uuid.UUID(document_id)
        counts = [Counter(_blinded(user_id, terms(c.text))) for c in chunks]
        if await self._cql.run(
            "SELECT page FROM {ks}.document_page_stats WHERE document_id = ? AND page = ?", (doc, number)
        ):
            await self._remove_stale(doc, number, {uuid.UUID(c.chunk_id): tf for c, tf in zip(chunks, counts)}, user_id)
        writes: list[tuple[str, tuple[Any, ...]]] = []
        for i, (chunk, tf) in enumerate(zip(chunks, counts)):
            chunk_id = uuid.UUID(chunk.chunk_id)
            row = (doc, chunk_id, number, chunk.ordinal, _seal(user_id, chunk.section, "section", chunk_id), chunk.kind,
                   _seal(user_id, chunk.text, "text", chunk_id), chunk.char_start, chunk.char_end, sum(tf.values()), set(tf))
            if vectors is None:
                writes.append((_INSERT_CHUNK, row))
            else:
                writes.append((_INSERT_CHUNK_VECTOR, (*row, [float(x) for x in vectors[i]])))
            writes += [(_INSERT_POSTING, (doc, term, chunk_id, n)) for term, n in tf.items()]
        await _bounded(self._cql.run(cql, values) for cql, values in writes)
        await self._cql.run_batch([
            ("INSERT INTO {ks}.document_page_stats (document_id, page, chunks, terms) VALUES (?, ?, ?, ?)",
             (doc, number, len(chunks), sum(sum(tf.values()) for tf in counts))),
            ("INSERT INTO {ks}.document_pages (document_id, page, text, method) VALUES (?, ?, ?, ?)",
             (doc, number, seal(user_id, text, at=_page_at(doc, number), deterministic=True), method)),
        ])

    async def _remove_stale(self, doc: uuid.UUID, number: int, new: dict[uuid.UUID, Counter[str]], user_id: str) -> None:
        """Delete the chunks of page ``number`` not in ``new``, and postings of terms a chunk no longer has.

        Only a rewrite pays this: the chunk table has no index on page, so it reads the partition."""
        rows = await self._cql.run(
            "SELECT chunk_id, page, text, posting_terms FROM {ks}.document_chunks WHERE document_id = ?", (doc,)
        )
        deletes: list[tuple[str, tuple[Any, ...]]] = []
        for row in rows:
            if row.page != number:
                continue
            kept = new.get(row.chunk_id, Counter())
            had = _posting_terms(row, user_id) or set()  # unknown only once the owner is erased: no rewrite then
            deletes += [(_DELETE_POSTING, (doc, term, row.chunk_id)) for term in had - kept.keys()]
            if row.chunk_id not in new:
                deletes.append(("DELETE FROM {ks}.document_chunks WHERE document_id = ? AND chunk_id = ?",
                                (doc, row.chunk_id)))
        await _bounded(self._cql.run(cql, values) for cql, values in deletes)

    async def purge(self, document_id: str, user_id: str) -> None:
        """Delete every index row of the document (pages, stats, chunks, postings).

        Pages and stats go first, so nothing reads as written while the rest goes; the
        postings are found from the chunks' text, so the chunks go last, and a purge that
        fails part-way can simply be run again. The status rows (``documents``,
        ``documents_by_conversation``) are not the index's: the materializer folds them.
        Each chunk row names its postings' (blinded) terms, so a purge after the owner's key
        was destroyed (an erasure) still finds them all. A row written before rows named them
        (schemas/cql/0015) whose text no longer opens leaves its terms unknown: then the
        document's postings are found by a scan of the table (``POSTINGS_SCAN``), slow but
        rare (only such documents purged after their owner's erasure)."""
        doc = uuid.UUID(document_id)
        await self._cql.run_batch([
            ("DELETE FROM {ks}.document_pages WHERE document_id = ?", (doc,)),
            ("DELETE FROM {ks}.document_page_stats WHERE document_id = ?", (doc,)),
        ])
        rows = await self._cql.run("SELECT chunk_id, text, posting_terms FROM {ks}.document_chunks WHERE document_id = ?", (doc,))
        named = [_posting_terms(row, user_id) for row in rows]
        postings = {term for terms_of in named if terms_of is not None for term in terms_of}
        if any(terms_of is None for terms_of in named):
            postings |= {row.term for row in await self._cql.run(POSTINGS_SCAN, (doc,))}
        await _bounded(
            self._cql.run("DELETE FROM {ks}.document_postings WHERE document_id = ? AND term = ?", (doc, term))
            for term in sorted(postings)
        )
        await self._cql.run("DELETE FROM {ks}.document_chunks WHERE document_id = ?", (doc,))

    # ------------------------------------------------------------------ reads

    async def pages_written(self, document_id: str) -> int:
        """The highest N such that pages 1..N are all written: where a resumed job goes on."""
        rows = await self._cql.run(
            "SELECT page FROM {ks}.document_page_stats WHERE document_id = ?", (uuid.UUID(document_id),)
        )
        written = 0
        for row in rows:  # clustering order: ascending pages
            if row.page != written + 1:
                break
            written = row.page
        return written

    async def counts(self, document_id: str) -> tuple[int, int]:
        """(chunks, pages read by OCR) over every page written: a resumed job's totals include the earlier run's."""
        doc = uuid.UUID(document_id)
        stats, methods = await asyncio.gather(
            self._cql.run("SELECT chunks FROM {ks}.document_page_stats WHERE document_id = ?", (doc,)),
            self._cql.run("SELECT method FROM {ks}.document_pages WHERE document_id = ?", (doc,)),
        )
        return sum(r.chunks or 0 for r in stats), sum(1 for r in methods if r.method == "ocr")

    async def page(self, document_id: str, number: int) -> PageRow | None:
        doc = uuid.UUID(document_id)
        rows = await self._cql.run("SELECT text, method FROM {ks}.document_pages WHERE document_id = ? AND page = ?", (doc, number))
        return PageRow(number, open_text(rows[0].text, at=_page_at(doc, number)) or "", rows[0].method or "") if rows else None

    async def keyword(self, scopes: Sequence[Scope], query_terms: Sequence[str], k: int) -> list[Hit]:
        """The ``k`` best chunks by BM25 over the union of the scoped documents' ready pages.

        N and avgdl come from the page stats up to each ``max_page``; df counts the
        postings whose chunk is on a ready page; tf and the chunk lengths come from
        the postings and chunk rows. A query term is counted once."""
        scopes = [s for s in scopes if s.max_page > 0]
        wanted = sorted(set(query_terms))
        if not scopes or not wanted or k <= 0:
            return []
        per_doc = await asyncio.gather(*(self._candidates(s, wanted) for s in scopes))
        n = sum(c.chunks for c in per_doc)
        if n == 0:
            return []
        avgdl = sum(c.length for c in per_doc) / n or 1.0
        df = Counter(term for c in per_doc for tf in c.tf.values() for term in tf)
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in df}
        scored: list[tuple[float, str, uuid.UUID, int]] = []
        for i, c in enumerate(per_doc):
            for chunk_id, tf in c.tf.items():
                norm = K1 * (1 - B + B * c.lengths[chunk_id] / avgdl)
                score = sum(idf[t] * f * (K1 + 1) / (f + norm) for t, f in tf.items())
                scored.append((score, c.scope.document_id, chunk_id, i))
        scored.sort(key=lambda s: (-s[0], s[1], s[2]))
        best = scored[:k]
        chosen: dict[int, list[uuid.UUID]] = defaultdict(list)
        for _, _, chunk_id, i in best:
            chosen[i].append(chunk_id)
        found = await asyncio.gather(*(self._chunks(per_doc[i].scope, ids) for i, ids in chosen.items()))
        rows = {(h.document_id, h.chunk_id): h for hits in found for h in hits}
        return [  # a chunk purged since its postings were read is simply gone
            replace(rows[key], score=score)
            for score, doc, chunk_id, _ in best
            if (key := (doc, str(chunk_id))) in rows
        ]

    async def _candidates(self, scope: Scope, wanted: Sequence[str]) -> _Candidates:
        doc = uuid.UUID(scope.document_id)
        stats, *postings = await asyncio.gather(
            self._cql.run(
                "SELECT chunks, terms FROM {ks}.document_page_stats WHERE document_id = ? AND page <= ?",
                (doc, scope.max_page),
            ),
            *(self._cql.run("SELECT chunk_id, tf FROM {ks}.document_postings WHERE document_id = ? AND term = ?",
                            (doc, blind(scope.user_id, term))) for term in wanted),
        )
        tf: dict[uuid.UUID, dict[str, int]] = defaultdict(dict)
        for term, rows in zip(wanted, postings):
            for row in rows:
                tf[row.chunk_id][term] = row.tf
        ids = sorted(tf)
        metas = await asyncio.gather(*(
            self._cql.run("SELECT chunk_id, page, terms FROM {ks}.document_chunks WHERE document_id = ? "
                          "AND chunk_id IN ?", (doc, ids[i : i + IN_GROUP]))
            for i in range(0, len(ids), IN_GROUP)
        ))
        lengths = {m.chunk_id: m.terms or 0 for rows in metas for m in rows if m.page <= scope.max_page}
        return _Candidates(
            scope=scope,
            chunks=sum(r.chunks or 0 for r in stats),
            length=sum(r.terms or 0 for r in stats),
            tf={chunk_id: tf[chunk_id] for chunk_id in lengths},
            lengths=lengths,
        )

    async def _chunks(self, scope: Scope, ids: Sequence[uuid.UUID]) -> list[Hit]:
        rows = await self._cql.run(
            "SELECT chunk_id, page, ordinal, section, text, char_start FROM {ks}.document_chunks "
            "WHERE document_id = ? AND chunk_id IN ?",
            (uuid.UUID(scope.document_id), list(ids)),
        )
        return [_hit(scope, row, 0.0) for row in rows]

    async def vector(self, scopes: Sequence[Scope], vector: Sequence[float], k: int) -> list[Hit]:
        """The ``k`` chunks nearest ``vector`` (cosine) over the scoped documents' ready pages.

        One ANN query per document (Cassandra's ANN cannot span partitions), merged by
        similarity. The ANN query cannot filter on page, so where a document is only
        partly ready the query asks again for more (up to Cassandra's LIMIT of 1000)
        until ``k`` ready chunks are found or the document has no more."""
        scopes = [s for s in scopes if s.max_page > 0]
        if not scopes or k <= 0:
            return []
        vec = [float(x) for x in vector]
        found = await asyncio.gather(*(self._nearest(s, vec, k) for s in scopes))
        hits = [h for hits in found for h in hits]
        hits.sort(key=lambda h: (-h.score, h.document_id, h.page, h.ordinal, h.chunk_id))
        return hits[:k]

    async def _nearest(self, scope: Scope, vector: list[float], k: int) -> list[Hit]:
        limit = min(k, ANN_LIMIT_MAX)
        while True:
            rows = await self._ann_rows((vector, uuid.UUID(scope.document_id), vector, limit))
            ready = [_hit(scope, r, r.score) for r in rows if r.page <= scope.max_page]
            if len(ready) >= k or len(rows) < limit or limit == ANN_LIMIT_MAX:
                return ready[:k]
            limit = min(limit * 4, ANN_LIMIT_MAX)

    async def _ann_rows(self, values: tuple[Any, ...]) -> list[Any]:
        """One ANN query: Cassandra refuses ANN above consistency ONE, and pages of it would be separate searches."""
        return await self._cql.run(_ANN, values, consistency=ConsistencyLevel.ONE, paged=False)


@dataclass(frozen=True)
class _Candidates:
    """One document's share of a keyword search: its ready-page statistics and the chunks holding a query term."""

    scope: Scope
    chunks: int  # chunks on ready pages (BM25's N, this document's part)
    length: int  # their summed term lengths
    tf: dict[uuid.UUID, dict[str, int]]  # chunk → query term → tf, ready chunks only
    lengths: dict[uuid.UUID, int]  # chunk → its length in terms


_CHUNK_COLUMNS = "document_id, chunk_id, page, ordinal, section, kind, text, char_start, char_end, terms, posting_terms"
_INSERT_CHUNK = f"INSERT INTO {{ks}}.document_chunks ({_CHUNK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_CHUNK_VECTOR = (
    f"INSERT INTO {{ks}}.document_chunks ({_CHUNK_COLUMNS}, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _posting_terms(row: Any, user_id: str) -> set[str] | None:
    """The terms a chunk row has postings under: as the row names them, or (a row written before it
    named them, schemas/cql/0015) from its text, which needs the owner's key; None when that key is
    destroyed (the text reads ``[erased]``)."""
    if row.posting_terms is not None:
        return set(row.posting_terms)
    text = open_text(row.text, at=_chunk_at("text", row.chunk_id)) or ""
    return None if text == ERASED else set(_blinded(user_id, terms(text)))


#: Every posting of one document, whatever its term: the table is partitioned by (document, term), so
#: this reads every partition (ALLOW FILTERING). For a purge whose terms cannot be known any more, and
#: for ``parley audit erasure``'s proof that none is left.
POSTINGS_SCAN = "SELECT term FROM {ks}.document_postings WHERE document_id = ? ALLOW FILTERING"
_INSERT_POSTING = "INSERT INTO {ks}.document_postings (document_id, term, chunk_id, tf) VALUES (?, ?, ?, ?)"
_DELETE_POSTING = "DELETE FROM {ks}.document_postings WHERE document_id = ? AND term = ? AND chunk_id = ?"
_ANN = (
    "SELECT chunk_id, page, ordinal, section, text, char_start, similarity_cosine(embedding, ?) AS score "
    "FROM {ks}.document_chunks WHERE document_id = ? ORDER BY embedding ANN OF ? LIMIT ?"
)


def _hit(scope: Scope, row: Any, score: float) -> Hit:
    return Hit(
        chunk_id=str(row.chunk_id),
        document_id=scope.document_id,
        page=row.page,
        ordinal=row.ordinal or 0,
        text=open_text(row.text, at=_chunk_at("text", row.chunk_id)) or "",
        section=open_text(row.section, at=_chunk_at("section", row.chunk_id)) or "",
        char_start=row.char_start or 0,
        score=float(score),
        filename=scope.filename,
    )


def _page_at(document_id: uuid.UUID, page: int) -> str:
    """Where a page's text is sealed for: its cell and its row (document and page)."""
    return cell_at("document_pages", "text", f"{document_id}/{page}")


def _chunk_at(column: str, chunk_id: uuid.UUID) -> str:
    return cell_at("document_chunks", column, chunk_id)


def _seal(user_id: str, text: str | None, column: str, chunk_id: uuid.UUID) -> str | None:
    # Deterministic: a page rewritten after a restart writes the same cells.
    return seal(user_id, text, at=_chunk_at(column, chunk_id), deterministic=True)


def _blinded(user_id: str, words: Iterable[str]) -> list[str]:
    return [blind(user_id, w) for w in words]


async def _bounded(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Await ``calls`` with at most ``WRITES_IN_FLIGHT`` of them running at once."""
    gate = asyncio.Semaphore(WRITES_IN_FLIGHT)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))
