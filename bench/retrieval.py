"""Retrieval quality and cost over the real Cassandra index, each figure next to a baseline of the same run.

The labelled set is bench/retrieval_set.py (five synthetic reports, 120
questions with their answer pages; how it was made is written there). It is
written into the running Cassandra under fresh document ids, through
``DocumentIndex`` as the document worker writes it, and purged afterwards.

Reported side by side:

- quality: recall@5 (the answer page among the first five passages) and MRR
  (1 / rank of the first passage from the answer page, over the top 20) for
  BM25 alone, vector alone, hybrid by plain RRF and hybrid as ``Retriever``
  fuses it (``convex`` at ``PARLEY_DOCUMENTS_HYBRID_ALPHA``; the local
  reranker ``FusedScore`` keeps the fused order), by question kind; every
  question is asked of all five documents at once.
  The questions are split in two halves by ``bench.retrieval_set.half``: a
  fact's position in its report, even → dev, odd → test (six facts of every
  report in each half, a fact's exact and paraphrased questions together).
  The fusion and its vector weight are chosen on the dev half only (the
  sweep and its rule are printed: ``choose``); the held-out test half is the
  figure to quote, all questions are shown beside it. The run says when the
  setting differs from what dev picks;
- BM25 over Cassandra postings against ``bm25s`` in memory on the same chunks
  and terms: whether they rank alike, and queries/s of each;
- ingestion pages/s (chunk + embed + write, and each step's share), and
  MiniLM's embedding throughput on chunks of ~200 word pieces;
- retrieval latency of one turn (``Retriever.retrieve``: query embedding,
  keyword and vector search, fusion, rerank), p50/p95, against a bare
  single-partition read of one page in the same process.

Pages are chunked by documents/chunking.py (its heading, then paragraphs); text
pages are given as text, so no PDF extraction is timed here (bench/ingest.py
times the whole pipeline).

Run: `python -m bench.retrieval [--k 20]` with Cassandra up.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import bm25s
import numpy as np

from bench.retrieval_set import Document, Question, build, half
from documents.chunking import Chunk, chunk_page
from documents.embedding import MiniLM
from documents.extract import Block, Page
from documents.index import K1, DocumentIndex, Hit, Scope
from documents.retrieval import RRF_K, FusedScore, Retriever, convex, rrf
from documents.settings import DocumentSettings
from documents.terms import terms
from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings, from_env

#: The documents' owner (this process installs no key service: text and terms are written plain).
OWNER = "u_bench_retrieval"

TOP = 5


def page_of(number: int, text: str) -> Page:
    """A page of the set as extraction would give it: its first paragraph the heading, the rest paragraphs."""
    heading, *paragraphs = text.split("\n\n")
    return Page(number, (Block("heading", heading), *(Block("paragraph", p) for p in paragraphs)), "text")


# ------------------------------------------------------------------ ingestion


@dataclass
class Ingested:
    ids: dict[str, str]  # document name → document id
    chunks: list[Chunk]  # documents.chunking's
    pages: int
    seconds: dict[str, float]  # chunk, embed, write


async def ingest(index: DocumentIndex, embedder: MiniLM, documents: Sequence[Document], budget: int,
                 out: Ingested) -> None:
    """Write ``documents`` into ``out`` (its ids filled as they are made: a failure still purges what was written)."""
    for document in documents:
        doc = out.ids[document.name] = str(uuid.uuid4())
        for number, text in enumerate(document.pages, start=1):
            t0 = time.perf_counter()
            page = page_of(number, text)
            chunks, _ = chunk_page(doc, page, budget_tokens=budget, count_tokens=embedder.count_tokens)
            t1 = time.perf_counter()
            vectors = embedder.embed([c.full_text for c in chunks])
            t2 = time.perf_counter()
            await index.write_page(doc, number, page.text, page.method, chunks, vectors, OWNER)
            t3 = time.perf_counter()
            out.seconds["chunk"] += t1 - t0
            out.seconds["embed"] += t2 - t1
            out.seconds["write"] += t3 - t2
            out.chunks += chunks
            out.pages += 1


def embedding_rate(embedder: MiniLM, n: int = 256) -> tuple[float, float]:
    """Chunks/s of MiniLM on texts of ~200 word pieces, and their mean length in word pieces."""
    _, questions = build()
    words = " ".join(q.text for q in questions).split()
    texts = [" ".join(words[(i * 37) % len(words):][:150] or words[:150]) for i in range(n)]
    embedder.embed(texts[:8])  # warm
    t0 = time.perf_counter()
    embedder.embed(texts)
    rate = n / (time.perf_counter() - t0)
    return rate, statistics.mean(min(embedder.count_tokens(t), 256) for t in texts)


# ------------------------------------------------------------------ quality


def rank_of(hits: Sequence[Hit], document_id: str, page: int) -> int | None:
    for rank, hit in enumerate(hits, start=1):
        if hit.document_id == document_id and hit.page == page:
            return rank
    return None


@dataclass
class Score:
    found: int = 0
    reciprocal: float = 0.0
    asked: int = 0

    def add(self, rank: int | None) -> None:
        self.asked += 1
        if rank is not None:
            self.found += rank <= TOP
            self.reciprocal += 1 / rank

    @property
    def recall(self) -> float:
        return self.found / self.asked

    @property
    def mrr(self) -> float:
        return self.reciprocal / self.asked

    def __str__(self) -> str:
        return f"{self.recall:6.3f} {self.mrr:6.3f}"


@dataclass(frozen=True)
class Asked:
    """One question's two rankings, searched once; every fusion is computed from them."""

    question: Question
    document_id: str  # where its answer is
    keyword: list[Hit]
    vector: list[Hit]


Fusion = Callable[[Sequence[Hit], Sequence[Hit]], list[Hit]]


async def ask(index: DocumentIndex, embedder: MiniLM, ing: Ingested, questions: Sequence[Question],
              scopes: Sequence[Scope], k: int) -> list[Asked]:
    vectors = embedder.embed([q.text for q in questions])
    return [
        Asked(q, ing.ids[q.document], await index.keyword(scopes, terms(q.text), k), await index.vector(scopes, v, k))
        for q, v in zip(questions, vectors)
    ]


def scored(asked: Sequence[Asked], fuse: Fusion, k: int) -> dict[str, Score]:
    """recall@TOP and MRR@k of ``fuse``'s ranking (FusedScore, the local reranker, keeps it), by question kind."""
    scores: dict[str, Score] = defaultdict(Score)
    for a in asked:
        rank = rank_of(fuse(a.keyword, a.vector)[:k], a.document_id, a.question.page)
        scores[a.question.kind].add(rank)
        scores["all"].add(rank)
    return scores


def _shifted(hits: Sequence[Hit]) -> list[Hit]:
    """Scores less the ranking's lowest: ``convex`` over these is min-max normalisation."""
    low = min((h.score for h in hits), default=0.0)
    return [replace(h, score=h.score - low) for h in hits]


def _ranked(hits: Sequence[Hit]) -> list[Hit]:
    """Scores 1/(RRF_K + rank): ``convex`` over these is RRF weighted alpha : 1 - alpha (both over 1/(RRF_K + 1))."""
    return [replace(h, score=1 / (RRF_K + r)) for r, h in enumerate(hits, start=1)]


#: The fusions the dev half chooses among, each with its weight of the vector search.
FAMILIES: dict[str, Callable[[float], Fusion]] = {
    "convex, score over best": lambda a: lambda kw, vec: convex(kw, vec, a),
    "convex, min-max": lambda a: lambda kw, vec: convex(_shifted(kw), _shifted(vec), a),
    f"weighted RRF, k={RRF_K}": lambda a: lambda kw, vec: convex(_ranked(kw), _ranked(vec), a),
}
#: The vector weights tried: 0, 0.05, ..., 1.
GRID = tuple(i / 20 for i in range(21))


def choose(dev: Sequence[Asked], k: int) -> tuple[str, float, list[str]]:
    """The family and weight the dev half picks, and the sweep's lines.

    The rule: best dev recall@TOP averaged over the weight and its two neighbours
    (a plateau, not a lucky spike: the dev half is only 60 questions), then best
    dev MRR, then the family listed first. Ties beyond that take the lower weight."""
    lines, candidates = [], []
    for order, (family, make) in enumerate(FAMILIES.items()):
        sweep = [scored(dev, make(a), k)["all"] for a in GRID]
        lines.append(f"  {family:<26} " + " ".join(f"{s.recall:.2f}" for s in sweep))
        for i, a in enumerate(GRID):
            near = [sweep[j].recall for j in (i - 1, i, i + 1) if 0 <= j < len(GRID)]
            candidates.append((-sum(near) / len(near), -sweep[i].mrr, order, a, family))
    _, _, _, alpha, family = min(candidates)
    return family, alpha, lines


def quality(asked: Sequence[Asked], alpha: float, k: int) -> list[str]:
    dev = [a for a in asked if half(a.question) == "dev"]
    test = [a for a in asked if half(a.question) == "test"]
    family, chosen, sweep = choose(dev, k)
    methods: dict[str, Fusion] = {
        "bm25": lambda kw, vec: list(kw),
        "vector": lambda kw, vec: list(vec),
        "hybrid (RRF)": lambda kw, vec: rrf([kw, vec]),
        f"hybrid (convex, a={alpha:g})": lambda kw, vec: convex(kw, vec, alpha),
    }
    lines = [f"dev half: recall@{TOP} of each fusion at vector weight {' '.join(f'{a:g}' for a in GRID[::4])} (every 0.05)",
             *sweep,
             f"  dev's choice: {family}, vector weight {chosen:g}; Retriever uses convex, score over best, "
             f"a={alpha:g} (PARLEY_DOCUMENTS_HYBRID_ALPHA)"
             + ("" if (family, chosen) == (next(iter(FAMILIES)), alpha) else "  <- NOT what dev chose"),
             ""]
    verdicts = []
    for name, part in (("dev (tuned on)", dev), ("test (held out)", test), ("all", asked)):
        lines.append(f"quality, {name}, {len(part)} questions: recall@{TOP} MRR@{k}"
                     f"   {'all':>13} {'exact':>13} {'paraphrase':>13}")
        scores = {method: scored(part, fuse, k) for method, fuse in methods.items()}
        for method, by_kind in scores.items():
            lines.append(f"  {method:<26} " + " ".join(f"{str(by_kind[kind]):>13}" for kind in ("all", "exact", "paraphrase")))
        best_single = max(scores["bm25"]["all"].found, scores["vector"]["all"].found)
        ours = scores[f"hybrid (convex, a={alpha:g})"]["all"].found
        verdicts.append(f"{name}: hybrid {'beats' if ours > best_single else 'does NOT beat'} both single methods")
    lines.append(f"target (recall@{TOP}): " + "; ".join(verdicts))
    return lines


# ------------------------------------------------------------------ BM25: Cassandra against bm25s


async def bm25_reference(index: DocumentIndex, ing: Ingested, questions: Sequence[Question],
                         scopes: Sequence[Scope], k: int) -> list[str]:
    corpus = [terms(c.text) for c in ing.chunks]
    reference = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    reference.index(corpus, show_progress=False)
    queries = [sorted(set(terms(q.text))) for q in questions]  # DocumentIndex.keyword counts a query term once
    t0 = time.perf_counter()
    found, scored = reference.retrieve(queries, k=k, show_progress=False, n_threads=1)
    memory_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    ours = [await index.keyword(scopes, terms(q.text), k) for q in questions]
    cassandra_s = time.perf_counter() - t0

    same_chunks, same_scores, score_gap = 0, 0, 0.0
    for hits, ids, values in zip(ours, found, scored):
        theirs = [(ing.chunks[i].chunk_id, float(s)) for i, s in zip(ids, values) if s > 0][:TOP]
        mine = [(h.chunk_id, h.score / (K1 + 1)) for h in hits[:TOP]]  # bm25s (Lucene's) drops the constant k1+1
        same_chunks += {c for c, _ in mine} == {c for c, _ in theirs}
        gaps = [abs(a - b) / b for (_, a), (_, b) in zip(mine, theirs)]
        same_scores += len(mine) == len(theirs) and all(g < 1e-4 for g in gaps)
        score_gap = max([score_gap, *gaps])
    n = len(questions)
    return [
        f"bm25, Cassandra against bm25s: same top-{TOP} scores {same_scores}/{n}, same top-{TOP} chunks "
        f"{same_chunks}/{n} (ties at 5th place may differ); largest relative score gap {score_gap:.1e} "
        "(bm25s computes in float32)",
        f"bm25 queries/s: Cassandra postings {n / cassandra_s:8.1f}   bm25s in memory {n / memory_s:10.1f}   "
        f"(ratio {memory_s / cassandra_s:.4f}; over {len(ing.chunks)} chunks, one query at a time)",
    ]


# ------------------------------------------------------------------ latency


async def latency(retriever: Retriever, cql: AsyncCql, ing: Ingested, questions: Sequence[Question],
                  scopes: Sequence[Scope]) -> list[str]:
    turn, bare, paths = [], [], defaultdict(int)
    doc = uuid.UUID(next(iter(ing.ids.values())))
    for question in questions:
        t0 = time.perf_counter()
        got = await retriever.retrieve(question.text, scopes, TOP)
        turn.append(time.perf_counter() - t0)
        paths[got.path] += 1
        t0 = time.perf_counter()
        await cql.run("SELECT text FROM {ks}.document_pages WHERE document_id = ? AND page = ?", (doc, 2))
        bare.append(time.perf_counter() - t0)

    def p(values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) * 1000

    return [
        f"retrieval per turn ({len(scopes)} documents, hybrid + rerank): p50 {p(turn, 50):6.1f} ms  "
        f"p95 {p(turn, 95):6.1f} ms   paths {dict(paths)}",
        f"baseline, a bare single-partition read:             p50 {p(bare, 50):6.1f} ms  p95 {p(bare, 95):6.1f} ms",
        f"ratio: p50 {p(turn, 50) / p(bare, 50):.1f}x  p95 {p(turn, 95) / p(bare, 95):.1f}x",
    ]


async def run(k: int) -> None:
    settings = DocumentSettings()
    cql = AsyncCql(from_env(CassandraSettings))
    index = DocumentIndex(cql)
    embedder = MiniLM()
    documents, questions = build()
    kinds = defaultdict(int)
    for q in questions:
        kinds[q.kind] += 1
    print(f"set: {len(documents)} documents, {sum(len(d.pages) for d in documents)} pages, "
          f"{len(questions)} questions {dict(kinds)}; every question asked of all documents")
    rate, tokens = embedding_rate(embedder)
    print(f"MiniLM embedding: {rate:.1f} chunks/s at {tokens:.0f} word pieces (batch 32, CPU)")
    ing = Ingested({}, [], 0, defaultdict(float))
    try:
        t0 = time.perf_counter()
        await ingest(index, embedder, documents, settings.chunk_tokens, ing)
        total = time.perf_counter() - t0
        shares = "  ".join(f"{step} {s / total:4.0%}" for step, s in ing.seconds.items())
        print(f"ingestion (chunk + embed + write, text pages): {ing.pages / total:.1f} pages/s, "
              f"{len(ing.chunks)} chunks   [{shares}]   write alone {ing.pages / ing.seconds['write']:.1f} pages/s")
        names = {d.name: d for d in documents}
        scopes = [Scope(doc, len(names[name].pages), name) for name, doc in ing.ids.items()]

        print()
        for line in quality(await ask(index, embedder, ing, questions, scopes, k), settings.hybrid_alpha, k):
            print(line)

        print()
        for line in await bm25_reference(index, ing, questions, scopes, k):
            print(line)
        retriever = Retriever(index, embedder, FusedScore(), k=k, timeout_s=settings.search_timeout_s,
                              alpha=settings.hybrid_alpha)
        await retriever.retrieve(questions[0].text, scopes, TOP)  # warm: statements prepared
        for line in await latency(retriever, cql, ing, questions, scopes):
            print(line)
    finally:
        await asyncio.gather(*(index.purge(doc, OWNER) for doc in ing.ids.values()))
        cql.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--k", type=int, default=DocumentSettings().retrieve_k, help="candidates per search")
    args = parser.parse_args()
    asyncio.run(run(args.k))


if __name__ == "__main__":
    main()
