"""Hybrid retrieval for a turn: keyword and vector search at once, fused by reciprocal rank, reranked.

Semantic search is optional (seed §8): when the embedder or the ANN query
fails or is slow, keyword search answers alone and the turn records the path
(``Retrieved.path``); keyword failing leaves vector search; both failing
raises ``RetrievalFailed``.

Rerankers: ``FusedScore`` in process (no cross-encoder's weights ship in a
package here, so the local one only reorders by what the searches saw), and
``HttpReranker`` for an SGLang-served cross-encoder in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from documents.embedding import Embedder
from documents.hits import Hit, Scope
from documents.settings import DocumentSettings
from documents.terms import terms

if TYPE_CHECKING:
    from documents.index import DocumentIndex

#: RRF's constant (Cormack et al.'s 60): damps the gap between first and tenth place.
RRF_K = 60


class RetrievalFailed(Exception):
    """Neither keyword nor vector search answered."""


def _order(hit: Hit) -> tuple[float, str, int, int, str]:
    return (-hit.score, hit.document_id, hit.page, hit.ordinal, hit.chunk_id)


def rrf(rankings: Sequence[Sequence[Hit]], k: int = RRF_K) -> list[Hit]:
    """Reciprocal rank fusion: a chunk scores the sum of 1/(k + rank) over the rankings it is in (rank from 1).

    A chunk in several rankings appears once, as first seen; ties go in document, page, ordinal order."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, hit in enumerate(ranking, start=1):
            if hit.chunk_id in seen:  # a ranking that repeats a chunk counts it at its best rank
                continue
            seen.add(hit.chunk_id)
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + 1.0 / (k + rank)
            first.setdefault(hit.chunk_id, hit)
    return sorted((replace(first[c], score=s) for c, s in fused.items()), key=_order)


class Reranker(Protocol):
    async def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """``hits`` (fused, best first) in the reranker's order, each with its new score."""
        ...


class FusedScore:
    """The local reranker: the fused (RRF) order as it is, for want of a model that reads the passages.

    A bonus for the share of query terms a passage holds was tried and left out: on
    bench/retrieval's set it lowered hybrid recall@5 from 0.82 to 0.77 (paraphrased
    questions share common words with wrong pages)."""

    async def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        return sorted(hits, key=_order)


class HttpReranker:
    """A cross-encoder served by SGLang: ``POST {base_url}/v1/rerank``.

    SGLang takes ``{"model", "query", "documents": [text, ...]}`` and answers a JSON
    list of ``{"index", "score", "document", ...}``, best first
    (sglang/srt/entrypoints/openai/serving_rerank.py)."""

    def __init__(self, base_url: str, model: str, *, timeout_s: float, client: httpx.AsyncClient | None = None) -> None:
        self._url = base_url.rstrip("/") + "/v1/rerank"
        self._model = model
        self._client = client or httpx.AsyncClient(timeout=timeout_s)

    async def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        response = await self._client.post(
            self._url, json={"model": self._model, "query": query, "documents": [h.text for h in hits]}
        )
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()
        scored = [replace(hits[int(item["index"])], score=float(item["score"])) for item in items]
        return sorted(scored, key=_order)

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class Retrieved:
    hits: list[Hit]
    path: str  # hybrid | keyword | vector | none: which searches answered (recorded on the turn)
    errors: tuple[str, ...]  # what failed, for the turn's metadata and the logs (no document or query text)


class Retriever:
    """One turn's retrieval over its documents' ready pages.

    ``k``: candidates each search returns; ``timeout_s``: longest each search may
    take (the embedding included) before the turn goes on without it."""

    def __init__(
        self,
        index: DocumentIndex,
        embedder: Embedder | None,
        reranker: Reranker,
        *,
        k: int = 20,
        timeout_s: float = 2.0,
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._reranker = reranker
        self._k = k
        self._timeout_s = timeout_s

    async def retrieve(self, query: str, scopes: Sequence[Scope], limit: int) -> Retrieved:
        ready = [s for s in scopes if s.max_page > 0]
        if not ready:
            return Retrieved([], "none", ())
        keyword, vector = await asyncio.gather(
            asyncio.wait_for(self._index.keyword(ready, terms(query), self._k), self._timeout_s),
            asyncio.wait_for(self._vector(query, ready), self._timeout_s),
            return_exceptions=True,
        )
        errors = tuple(
            f"{name}: {_describe(result)}"
            for name, result in (("keyword", keyword), ("vector", vector))
            if isinstance(result, BaseException)
        )
        rankings = [r for r in (keyword, vector) if not isinstance(r, BaseException)]
        if not rankings:
            assert isinstance(keyword, BaseException)
            raise RetrievalFailed("; ".join(errors)) from keyword
        path = "hybrid" if len(rankings) == 2 else ("keyword" if rankings[0] is keyword else "vector")
        fused = rrf(rankings)[: self._k]
        try:
            ranked = await asyncio.wait_for(self._reranker.rerank(query, fused), self._timeout_s)
        except Exception as exc:  # a reranker down costs the order, not the answer
            errors += (f"rerank: {_describe(exc)}",)
            ranked = fused
        return Retrieved(ranked[:limit], path, errors)

    async def _vector(self, query: str, scopes: Sequence[Scope]) -> list[Hit]:
        if self._embedder is None:
            raise RetrievalFailed("no embedder configured")
        (vector,) = await asyncio.to_thread(self._embedder.embed, [query])  # CPU work: off the event loop
        return await self._index.vector(scopes, vector, self._k)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


def reranker_from(settings: DocumentSettings) -> Reranker:
    """The reranking server the settings name, or the fused order (no cross-encoder ships offline)."""
    if settings.reranker_url:
        return HttpReranker(settings.reranker_url, settings.reranker_model, timeout_s=settings.search_timeout_s)
    return FusedScore()
