"""DocumentIndex on real Cassandra: pages written, searched by keyword and vector, rewritten, purged."""

from __future__ import annotations

import math
import uuid

import pytest

from documents.chunking import Chunk
from documents.index import DocumentIndex, PageRow, Scope
from documents.terms import terms
from parley.cassandra import AsyncCql
from schemas import sealing

pytestmark = pytest.mark.integration

DIMS = 384
#: The documents' owner: its data key seals their text and keys their terms (DESIGN.md §12).
OWNER = "u_index_owner"


def scope(document_id: str, max_page: int, filename: str = "") -> Scope:
    return Scope(document_id, max_page, filename, OWNER)


def chunks_of(doc: str, page: int, *texts: str) -> list[Chunk]:
    out, at = [], 0
    for ordinal, text in enumerate(texts):
        chunk_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc}:{page}:{ordinal}"))
        out.append(Chunk(chunk_id, doc, page, ordinal, f"Section {page}", "text", text, at, at + len(text)))
        at += len(text) + 1
    return out


def axis(i: int) -> list[float]:
    """A unit vector along axis ``i``, a little towards axis 0 (no two pages alike, all comparable)."""
    v = [0.0] * DIMS
    v[0], v[i] = 0.1, 1.0
    return v


PAGES = {
    1: ("Revenue in Q3 2024 grew to 41 million on strong sales of ACME-7.", "Margins held steady."),
    2: ("The Lisbon warehouse switched to solar power.", "Energy costs fell by a third."),
    3: ("Headcount rose to 1,200 staff after the merger.", "Hiring paused in December."),
}


@pytest.fixture
async def index(cassandra, cassandra_settings):
    cql = AsyncCql(cassandra_settings, cassandra)
    yield DocumentIndex(cql), cql


async def write(idx: DocumentIndex, doc: str, pages=PAGES) -> None:
    for number, texts in pages.items():
        chunks = chunks_of(doc, number, *texts)
        await idx.write_page(doc, number, "\n".join(texts), "text", chunks, [axis(number)] * len(chunks), OWNER)


async def rows(cql: AsyncCql, doc: str) -> dict[str, list]:
    d = uuid.UUID(doc)
    found = {
        table: sorted(tuple(r) for r in await cql.run(f"SELECT * FROM {{ks}}.{table} WHERE document_id = ?", (d,)))
        for table in ("document_pages", "document_page_stats", "document_chunks")
    }
    # Every posting of the document, whatever its term: a scan, fine on a test keyspace.
    found["document_postings"] = sorted(
        (r.term, str(r.chunk_id), r.tf)
        for r in await cql.run(
            "SELECT term, chunk_id, tf FROM {ks}.document_postings WHERE document_id = ? ALLOW FILTERING", (d,)
        )
    )
    return found


async def test_keyword_search_finds_the_page_and_ranks_the_rare_term_first(index) -> None:
    idx, _ = index
    doc = str(uuid.uuid4())
    await write(idx, doc)
    hits = await idx.keyword([scope(doc, 3, "r.pdf")], terms("ACME-7 sales in Q3"), k=5)
    assert hits[0].page == 1 and hits[0].ordinal == 0 and "ACME-7" in hits[0].text
    assert hits[0].filename == "r.pdf" and hits[0].section == "Section 1" and hits[0].score > 0
    assert [h.page for h in await idx.keyword([scope(doc, 3)], terms("solar warehouse"), k=5)] == [2]
    assert await idx.keyword([scope(doc, 3)], terms("kangaroo"), k=5) == []


async def test_keyword_scores_are_bm25_over_the_union_of_documents(index) -> None:
    idx, _ = index
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    await write(idx, a)
    await write(idx, b, {1: ("Solar panels, solar inverters and solar batteries.",)})
    hits = await idx.keyword([scope(a, 3), scope(b, 1)], ["solar"], k=5)
    assert {h.document_id for h in hits} == {a, b}
    # By hand: N = 7 chunks, df = 2, avgdl = (sum of the 7 chunks' lengths) / 7.
    lengths = [len(terms(t)) for texts in PAGES.values() for t in texts] + [len(terms(
        "Solar panels, solar inverters and solar batteries."))]
    n, avgdl = 7, sum(lengths) / 7
    idf = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))
    expect_b = idf * 3 * 2.2 / (3 + 1.2 * (1 - 0.75 + 0.75 * lengths[-1] / avgdl))
    assert hits[0].document_id == b and hits[0].score == pytest.approx(expect_b)


async def test_vector_search_finds_the_nearest_page(index) -> None:
    idx, _ = index
    doc = str(uuid.uuid4())
    await write(idx, doc)
    hits = await idx.vector([scope(doc, 3)], axis(2), k=2)
    assert [h.page for h in hits] == [2, 2] and hits[0].score > 0.9
    assert {h.ordinal for h in hits} == {0, 1}


async def test_pages_past_the_ready_mark_are_never_served(index) -> None:
    idx, _ = index
    doc = str(uuid.uuid4())
    await write(idx, doc)
    assert await idx.keyword([scope(doc, 2)], terms("headcount merger"), k=5) == []
    near = await idx.vector([scope(doc, 2)], axis(3), k=10)
    assert near and all(h.page <= 2 for h in near)
    assert await idx.keyword([scope(doc, 0)], terms("revenue"), k=5) == []
    assert await idx.vector([scope(doc, 0)], axis(1), k=5) == []


async def test_ready_mark_also_bounds_the_bm25_statistics(index) -> None:
    """N and df count only ready chunks: the same query over pages 1..2 scores as if page 3 did not exist."""
    idx, _ = index
    full, short = str(uuid.uuid4()), str(uuid.uuid4())
    await write(idx, full)
    await write(idx, short, {n: PAGES[n] for n in (1, 2)})
    assert [h.score for h in await idx.keyword([scope(full, 2)], terms("energy costs"), k=5)] == pytest.approx(
        [h.score for h in await idx.keyword([scope(short, 2)], terms("energy costs"), k=5)]
    )


async def test_rewriting_pages_leaves_the_same_rows(index) -> None:
    idx, cql = index
    doc = str(uuid.uuid4())
    await write(idx, doc)
    before = await rows(cql, doc)
    await write(idx, doc)
    assert await rows(cql, doc) == before
    assert len(before["document_chunks"]) == 6


async def test_a_rewrite_with_fewer_chunks_removes_the_old_ones_and_their_postings(index) -> None:
    idx, cql = index
    doc, fresh = str(uuid.uuid4()), str(uuid.uuid4())
    await write(idx, doc, {1: ("Margins held steady.", "An extra line about energy.")})
    await write(idx, doc, {1: ("Margins held steady.",)})
    await write(idx, fresh, {1: ("Margins held steady.",)})
    got, want = await rows(cql, doc), await rows(cql, fresh)
    assert len(got["document_chunks"]) == 1
    assert [p[0] for p in got["document_postings"]] == [p[0] for p in want["document_postings"]]
    assert await idx.keyword([scope(doc, 1)], terms("energy"), k=5) == []


async def test_pages_written_is_the_contiguous_prefix(index) -> None:
    idx, _ = index
    doc = str(uuid.uuid4())
    assert await idx.pages_written(doc) == 0
    await write(idx, doc, {1: PAGES[1], 2: PAGES[2], 4: ("A page after a gap.",)})
    assert await idx.pages_written(doc) == 2
    await write(idx, doc, {3: PAGES[3]})
    assert await idx.pages_written(doc) == 4


async def test_page_answers_its_text_and_method(index) -> None:
    idx, _ = index
    doc = str(uuid.uuid4())
    await idx.write_page(doc, 1, "Scanned words", "ocr", chunks_of(doc, 1, "Scanned words"), None, OWNER)
    assert await idx.page(doc, 1) == PageRow(1, "Scanned words", "ocr")
    assert await idx.page(doc, 2) is None
    # A page without embeddings is keyword-searchable and absent from vector search.
    assert [h.page for h in await idx.keyword([scope(doc, 1)], ["scan"], k=5)] == [1]
    assert await idx.vector([scope(doc, 1)], axis(1), k=5) == []


async def test_purge_removes_every_row(index) -> None:
    idx, cql = index
    doc = str(uuid.uuid4())
    await write(idx, doc)
    await idx.purge(doc, OWNER)
    assert all(not found for found in (await rows(cql, doc)).values())
    assert await idx.pages_written(doc) == 0 and await idx.page(doc, 1) is None
    assert await idx.keyword([scope(doc, 3)], terms("revenue"), k=5) == []
    assert await idx.vector([scope(doc, 3)], axis(1), k=5) == []



class DestroyableKey:
    """A stand-in key service whose key can be destroyed: terms are keyed and text opens while it lives;
    afterwards no term can be keyed again and sealed text reads "[erased]" (as the real service answers
    for an erased user). Sealing is a marked copy: what is sealed is not under test here."""

    def __init__(self) -> None:
        self.destroyed = False

    def blind(self, user_id: str, term: str) -> str:
        return "" if self.destroyed else "b:" + term[::-1]

    def seal(self, user_id: str, text: str, *, at: str, deterministic: bool = False) -> str:
        return f"{sealing.PREFIX}{user_id}:1:{text}"

    def open(self, value: str, *, at: str) -> str:
        return sealing.ERASED if self.destroyed else value.split(":", 3)[3]

    async def prefetch(self, user_ids: object, *, create: bool = False) -> None:
        return None


@pytest.mark.parametrize("named", [True, False], ids=["rows-name-their-terms", "rows-from-before-0015"])
async def test_a_purge_after_the_owners_key_is_destroyed_still_removes_every_posting(index, named: bool) -> None:
    """An erasure deletes the user's documents and destroys their key; the document worker purges later,
    when no term can be keyed again: the chunk rows say which postings there are, and for rows written
    before they said it (their text now "[erased]") the postings are found by a scan (review M7)."""
    idx, cql = index
    doc = str(uuid.uuid4())
    key, held = DestroyableKey(), sealing.installed()  # the session's key service, put back after
    sealing.install(key)
    try:
        await write(idx, doc)
        assert (await rows(cql, doc))["document_postings"]
        if not named:
            for row in await cql.run("SELECT chunk_id FROM {ks}.document_chunks WHERE document_id = ?", (uuid.UUID(doc),)):
                await cql.run("UPDATE {ks}.document_chunks SET posting_terms = null WHERE document_id = ? AND chunk_id = ?",
                              (uuid.UUID(doc), row.chunk_id))  # fmt: skip
        key.destroyed = True
        await idx.purge(doc, OWNER)
        assert all(not found for found in (await rows(cql, doc)).values())
    finally:
        sealing.install(held)
