"""Hybrid retrieval for a turn: keyword and vector search at once, fused by a convex combination, reranked.

Fusion (``convex``) follows Bruch, Gai & Ingber 2023 ("An Analysis of Fusion
Functions for Hybrid Retrieval", ACM TOIS): each search's scores divided by
its best of the query (both have a theoretical minimum of 0: BM25, and
Cassandra's cosine similarity in [0, 1]), then ``alpha * vector + (1 - alpha)
* keyword``. Plain reciprocal rank fusion (``rrf``, kept as the bench's
baseline) lets BM25's poor rankings of paraphrased questions dilute the vector
ranking, and throws away how far ahead a rare-term match is. On bench/retrieval's
held-out half the convex combination beats RRF (recall@5 0.883 against 0.867, MRR
0.742 against 0.690) and BM25, but not vector search alone (0.900, MRR 0.840): on
that half vector search already finds 29 of 30 exact questions, and BM25's share
costs one paraphrase. On the dev half and over all 120 questions it beats both
(all: 0.850 against vector 0.825, RRF 0.817).

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
#: The vector search's weight in ``convex``: DocumentSettings.hybrid_alpha's default (chosen on bench/retrieval's dev half).
HYBRID_ALPHA = 0.9


class RetrievalFailed(Exception):
    """Neither keyword nor vector search answered."""


def _order(hit: Hit) -> tuple[float, int, int, str, str]:
    """Best score first; ties by page and ordinal, and only then by ids (random per document) for a total order."""
    return (-hit.score, hit.page, hit.ordinal, hit.document_id, hit.chunk_id)


def _best_first(ranking: Sequence[Hit]) -> dict[str, Hit]:
    """Each chunk once, at its first (best) place in the ranking."""
    out: dict[str, Hit] = {}
    for hit in ranking:
        out.setdefault(hit.chunk_id, hit)
    return out


def _over_best(hits: dict[str, Hit]) -> dict[str, float]:
    """Scores divided by the ranking's best (theoretical-minimum normalisation: 0 stays 0, the best becomes 1)."""
    top = max((h.score for h in hits.values()), default=0.0)
    return {c: max(h.score, 0.0) / top if top > 0 else 0.0 for c, h in hits.items()}


def convex(keyword: Sequence[Hit], vector: Sequence[Hit], alpha: float = HYBRID_ALPHA) -> list[Hit]:
    """``alpha * vector + (1 - alpha) * keyword`` over the union of both rankings, each score over its ranking's best.

    A chunk one search did not return scores 0 there (below anything it did return).
    Ties go to the higher vector share, then by page and ordinal. Either ranking may be
    empty (its search failed or found nothing): the other then has all the weight, so
    its order comes out unchanged whatever ``alpha`` is."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (PARLEY_DOCUMENTS_HYBRID_ALPHA), not {alpha}")
    kw, vec = _best_first(keyword), _best_first(vector)
    if not vec:
        alpha = 0.0
    elif not kw:
        alpha = 1.0
    kw_share, vec_share = _over_best(kw), _over_best(vec)
    hits = {**kw, **vec}  # the same chunk either way; its score is replaced below
    fused = {c: alpha * vec_share.get(c, 0.0) + (1 - alpha) * kw_share.get(c, 0.0) for c in hits}
    return sorted(
        (replace(hits[c], score=s) for c, s in fused.items()),
        key=lambda h: (-h.score, -vec_share.get(h.chunk_id, 0.0), *_order(h)[1:]),
    )


def rrf(rankings: Sequence[Sequence[Hit]], k: int = RRF_K) -> list[Hit]:
    """Reciprocal rank fusion: a chunk scores the sum of 1/(k + rank) over the rankings it is in (rank from 1).

    A chunk in several rankings appears once, as first seen; ties go in page, ordinal order."""
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
    """The local reranker: the fused order as it is, for want of a model that reads the passages.

    A bonus for the share of query terms a passage holds was tried and left out: on
    bench/retrieval's set it lowered hybrid (RRF) recall@5 from 0.82 to 0.77 (paraphrased
    questions share common words with wrong pages)."""

    async def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        return list(hits)


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
    take (the embedding included) before the turn goes on without it; ``alpha``:
    the vector search's weight in the fusion (``convex``)."""

    def __init__(
        self,
        index: DocumentIndex,
        embedder: Embedder | None,
        reranker: Reranker,
        *,
        k: int = 20,
        timeout_s: float = 2.0,
        alpha: float = HYBRID_ALPHA,
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1] (PARLEY_DOCUMENTS_HYBRID_ALPHA), not {alpha}")
        self._index = index
        self._embedder = embedder
        self._reranker = reranker
        self._k = k
        self._timeout_s = timeout_s
        self._alpha = alpha

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
        if isinstance(keyword, BaseException) and isinstance(vector, BaseException):
            raise RetrievalFailed("; ".join(errors)) from keyword
        if isinstance(keyword, BaseException):
            path, keyword = "vector", []
        elif isinstance(vector, BaseException):
            path, vector = "keyword", []
        else:
            path = "hybrid"
        fused = convex(keyword, vector, self._alpha)[: self._k]
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
