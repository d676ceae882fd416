"""A turn's document search on real Cassandra: owner-scoped statuses, the ready mark, and keyword search
answering alone when semantic search is down (seed §8), the turn recording which path answered."""

from __future__ import annotations

from schemas import sealing

import uuid

import pytest

from documents.chunking import chunk_page
from documents.embedding import EmbeddingUnavailable, MiniLM
from documents.extract import Block, Page
from documents.index import DocumentIndex
from documents.retrieval import FusedScore, Retriever
from schemas import events as ev
from streams.document_search import DocumentSearch
from streams.document_status import statements_for
from streams.store import Store

pytestmark = pytest.mark.integration

PAGES = [
    "The ferry timetable changed in May; boats now leave every forty minutes.",
    "Ticket revenue rose to 38 million kroner after the fare reform.",
    "The new battery ferry MV Solvik entered service in March.",
    "Crew training covered evacuation drills and first aid.",
]


class Down:
    """An embedder whose server is unreachable."""

    name, dims = "down", 384

    def embed(self, texts):
        raise EmbeddingUnavailable("embedding server down")

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


async def indexed(store: Store, user_id: str, embedder: MiniLM, *, ready: int) -> str:
    """A document of PAGES written to the index, its status row saying pages 1..ready are searchable."""
    doc = str(uuid.uuid4())
    index = DocumentIndex(store.cql)
    for n, text in enumerate(PAGES, start=1):
        page = Page(n, (Block("paragraph", text),), "text")
        chunks, _ = chunk_page(doc, page)
        await index.write_page(doc, n, page.text, page.method, chunks, embedder.embed([c.text for c in chunks]), user_id)
    up = ev.DocumentUploaded(document_id=doc, user_id=user_id, filename="ferries.pdf", media_type="application/pdf",
                             size_bytes=1, sha256="x", storage_uri="file:///x")  # fmt: skip
    batch = ev.DocumentPagesExtracted(document_id=doc, user_id=user_id, pages=ready, first_page=1, last_page=ready,
                                      pages_total=len(PAGES))  # fmt: skip
    for event in (up, batch):
        for s in statements_for(event, sealing.sealer()):
            await store.run(s.cql.replace("{ks}.", ""), s.values)
    return doc


def search(store: Store, embedder) -> DocumentSearch:
    retriever = Retriever(DocumentIndex(store.cql), embedder, FusedScore(), k=10, timeout_s=10.0)
    return DocumentSearch(store, retriever, passages=2, passage_tokens=400, count=lambda t: len(t.split()))


async def test_hybrid_finds_the_page_and_keyword_alone_answers_when_embeddings_are_down(cassandra, cassandra_settings, minilm) -> None:  # cassandra: the migrated keyspace
    store = Store(cassandra_settings)
    try:
        user = f"u-{uuid.uuid4().hex[:8]}"
        doc = await indexed(store, user, minilm, ready=4)
        question = "How much ticket revenue in kroner?"
        hybrid = await search(store, minilm).search(user, [doc], question)
        assert hybrid.path == "hybrid" and 2 in [p.page for p in hybrid.passages]
        keyword = await search(store, Down()).search(user, [doc], question)
        assert keyword.path == "keyword" and keyword.passages[0].page == 2
        assert keyword.passages[0].label == "[ferries.pdf p.2]"
    finally:
        store.close()


async def test_pages_past_the_ready_mark_and_other_users_documents_are_never_searched(cassandra, cassandra_settings, minilm) -> None:  # cassandra: the migrated keyspace
    store = Store(cassandra_settings)
    try:
        user = f"u-{uuid.uuid4().hex[:8]}"
        doc = await indexed(store, user, minilm, ready=2)
        early = await search(store, minilm).search(user, [doc], "When did the battery ferry MV Solvik enter service?")
        assert all(p.page <= 2 for p in early.passages)
        assert "pages 1–2 of 4 indexed" in early.note
        stranger = await search(store, minilm).search("someone-else", [doc], "ticket revenue")
        assert stranger.passages == [] and stranger.documents[0].status == "missing"
    finally:
        store.close()
