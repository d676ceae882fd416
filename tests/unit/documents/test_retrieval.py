"""Fusion, the local reranker and the Retriever's fallbacks, over an in-memory index (no Cassandra)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import httpx
import pytest

from documents.hits import Hit, Scope
from documents.settings import DocumentSettings
from documents.retrieval import RRF_K, FusedScore, HttpReranker, RetrievalFailed, Retriever, reranker_from, rrf


def hit(chunk_id: str, *, doc: str = "d1", page: int = 1, ordinal: int = 0, text: str = "", score: float = 0.0) -> Hit:
    return Hit(chunk_id, doc, page, ordinal, text, "", 0, score)


# ------------------------------------------------------------------ rrf


def test_rrf_sums_reciprocal_ranks_and_puts_agreement_first() -> None:
    a, b, c = hit("a"), hit("b"), hit("c")
    fused = rrf([[a, b, c], [b, c]])
    assert [h.chunk_id for h in fused] == ["b", "c", "a"]
    assert fused[0].score == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    assert fused[2].score == pytest.approx(1 / (RRF_K + 1))


def test_rrf_lists_each_chunk_once_as_first_seen() -> None:
    first = hit("a", text="from keyword", score=7.0)
    fused = rrf([[first, first], [hit("a", text="from vector", score=0.9)]])
    assert len(fused) == 1
    assert fused[0].text == "from keyword"
    assert fused[0].score == pytest.approx(2 / (RRF_K + 1))  # a repeat within one ranking counts once


def test_rrf_breaks_ties_by_document_page_and_ordinal_whatever_the_input_order() -> None:
    x, y, z = hit("x", doc="d2", page=1), hit("y", doc="d1", page=3), hit("z", doc="d1", page=2, ordinal=1)
    assert [h.chunk_id for h in rrf([[x], [y], [z]])] == ["z", "y", "x"]
    assert rrf([[x], [y], [z]]) == rrf([[z], [x], [y]])


def test_rrf_of_nothing_is_nothing() -> None:
    assert rrf([]) == rrf([[], []]) == []


async def test_fused_score_keeps_the_fused_order_and_breaks_ties_the_same_way() -> None:
    fused = rrf([[hit("a", page=2), hit("b")], [hit("c", page=1), hit("a", page=2)]])
    assert await FusedScore().rerank("anything", list(reversed(fused))) == fused


# ------------------------------------------------------------------ Retriever


class FakeIndex:
    """keyword and vector of DocumentIndex over fixed answers; either can be made to fail or stall."""

    def __init__(self, keyword: list[Hit], vector: list[Hit]) -> None:
        self.keyword_hits, self.vector_hits = keyword, vector
        self.keyword_error: Exception | None = None
        self.vector_error: Exception | None = None
        self.stall_s = 0.0
        self.calls: list[tuple[str, Sequence[Scope]]] = []

    async def keyword(self, scopes: Sequence[Scope], query_terms: Sequence[str], k: int) -> list[Hit]:
        self.calls.append(("keyword", scopes))
        if self.keyword_error:
            raise self.keyword_error
        return self.keyword_hits[:k]

    async def vector(self, scopes: Sequence[Scope], vector: Sequence[float], k: int) -> list[Hit]:
        self.calls.append(("vector", scopes))
        await asyncio.sleep(self.stall_s)
        if self.vector_error:
            raise self.vector_error
        return self.vector_hits[:k]


class FakeEmbedder:
    name, dims = "fake", 3

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.error:
            raise self.error
        return [[1.0, 0.0, 0.0] for _ in texts]


class BrokenReranker:
    async def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        raise ConnectionError("reranker down")


SCOPES = [Scope("d1", max_page=3, filename="a.pdf")]
KW = [hit("k1", text="alpha"), hit("both", text="alpha beta")]
VEC = [hit("v1", text="gamma"), hit("both", text="alpha beta")]


def retriever(index: FakeIndex, embedder: FakeEmbedder | None = None, **kw) -> Retriever:
    return Retriever(index, embedder, FusedScore(), **kw)  # type: ignore[arg-type]


async def test_both_searches_answer_hybrid_and_agreement_ranks_first() -> None:
    got = await retriever(FakeIndex(KW, VEC), FakeEmbedder()).retrieve("alpha", SCOPES, limit=2)
    assert got.path == "hybrid" and got.errors == ()
    assert [h.chunk_id for h in got.hits] == ["both", "k1"]


async def test_an_embedder_that_fails_leaves_keyword_answering() -> None:
    got = await retriever(FakeIndex(KW, VEC), FakeEmbedder(RuntimeError("model gone"))).retrieve("alpha", SCOPES, 5)
    assert got.path == "keyword"
    assert [h.chunk_id for h in got.hits] == ["k1", "both"]
    assert got.errors == ("vector: RuntimeError: model gone",)


async def test_no_embedder_at_all_is_keyword_search() -> None:
    got = await retriever(FakeIndex(KW, VEC), None).retrieve("alpha", SCOPES, 5)
    assert got.path == "keyword" and got.errors[0].startswith("vector: RetrievalFailed")


async def test_a_slow_vector_search_times_out_and_keyword_answers() -> None:
    index = FakeIndex(KW, VEC)
    index.stall_s = 5.0
    got = await retriever(index, FakeEmbedder(), timeout_s=0.05).retrieve("alpha", SCOPES, 5)
    assert got.path == "keyword" and got.errors == ("vector: timed out",)


async def test_keyword_failing_leaves_vector_answering() -> None:
    index = FakeIndex(KW, VEC)
    index.keyword_error = ConnectionError("postings unreadable")
    got = await retriever(index, FakeEmbedder()).retrieve("alpha", SCOPES, 5)
    assert got.path == "vector"
    assert [h.chunk_id for h in got.hits] == ["v1", "both"]


async def test_both_failing_raises() -> None:
    index = FakeIndex(KW, VEC)
    index.keyword_error = ConnectionError("down")
    with pytest.raises(RetrievalFailed, match="keyword: ConnectionError: down; vector: RuntimeError"):
        await retriever(index, FakeEmbedder(RuntimeError("x"))).retrieve("alpha", SCOPES, 5)


async def test_no_ready_pages_searches_nothing() -> None:
    index = FakeIndex(KW, VEC)
    got = await retriever(index, FakeEmbedder()).retrieve("alpha", [Scope("d1", 0), Scope("d2", 0)], 5)
    assert (got.hits, got.path, got.errors) == ([], "none", ())
    assert index.calls == []


async def test_only_documents_with_ready_pages_are_searched() -> None:
    index = FakeIndex(KW, VEC)
    await retriever(index, FakeEmbedder()).retrieve("alpha", [Scope("d1", 2), Scope("d2", 0)], 5)
    assert {tuple(s.document_id for s in scopes) for _, scopes in index.calls} == {("d1",)}


async def test_a_broken_reranker_costs_the_order_not_the_answer() -> None:
    got = await Retriever(FakeIndex(KW, VEC), FakeEmbedder(), BrokenReranker()).retrieve("alpha", SCOPES, 5)  # type: ignore[arg-type]
    assert got.path == "hybrid" and [h.chunk_id for h in got.hits] == ["both", "k1", "v1"]
    assert got.errors == ("rerank: ConnectionError: reranker down",)


async def test_limit_cuts_the_reranked_list() -> None:
    got = await retriever(FakeIndex(KW, VEC), FakeEmbedder()).retrieve("alpha", SCOPES, limit=1)
    assert [h.chunk_id for h in got.hits] == ["both"]


async def test_http_reranker_sends_sglang_shape_and_orders_by_its_scores() -> None:
    seen: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append({"url": str(request.url), **json.loads(request.content)})
        return httpx.Response(200, json=[{"index": 1, "score": 0.9, "document": "y"},
                                         {"index": 0, "score": 0.2, "document": "x"}])

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    reranker = HttpReranker("http://rerank:30000", "bge", timeout_s=1, client=client)
    ranked = await reranker.rerank("q", [hit("a", text="x"), hit("b", text="y")])
    assert seen == [{"url": "http://rerank:30000/v1/rerank", "model": "bge", "query": "q", "documents": ["x", "y"]}]
    assert [(h.chunk_id, h.score) for h in ranked] == [("b", 0.9), ("a", 0.2)]
    assert await reranker.rerank("q", []) == []


def test_reranker_from_settings() -> None:
    assert isinstance(reranker_from(DocumentSettings(reranker_url="")), FusedScore)
    assert isinstance(reranker_from(DocumentSettings(reranker_url="http://r:1")), HttpReranker)
