"""Retrieval quality and cost over the real Cassandra index, each figure next to a baseline of the same run.

The labelled set is bench/retrieval_set.py (five synthetic reports, 120
questions with their answer pages; how it was made is written there). It is
written into the running Cassandra under fresh document ids, through
``DocumentIndex`` as the document worker writes it, and purged afterwards.

Reported side by side:

- quality: recall@5 (the answer page among the first five passages) and MRR
  (1 / rank of the first passage from the answer page, over the top 20) for
  BM25 alone, vector alone and hybrid (RRF; the local reranker ``FusedScore``
  keeps its order), by question kind; every question is asked of all five documents at once;
- BM25 over Cassandra postings against ``bm25s`` in memory on the same chunks
  and terms: whether they rank alike, and queries/s of each;
- ingestion pages/s (chunk + embed + write, and each step's share), and
  MiniLM's embedding throughput on chunks of ~200 word pieces;
- retrieval latency of one turn (``Retriever.retrieve``: query embedding,
  keyword and vector search, fusion, rerank), p50/p95, against a bare
  single-partition read of one page in the same process.

Chunking here is a stand-in (paragraphs packed greedily to the token budget)
until documents/chunking.py lands; text pages are given as text (no PDF
extraction is timed).

Run: `python -m bench.retrieval [--k 20]` with Cassandra up.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np

from bench.retrieval_set import Document, Question, build
from documents.embedding import MiniLM
from documents.index import K1, DocumentIndex, Hit, Scope
from documents.retrieval import FusedScore, Retriever, rrf
from documents.settings import DocumentSettings
from documents.terms import terms
from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings, from_env

TOP = 5


@dataclass(frozen=True)
class Chunk:  # the fields of documents.chunking.Chunk that DocumentIndex reads
    chunk_id: str
    document_id: str
    page: int
    ordinal: int
    section: str
    kind: str
    text: str
    char_start: int
    char_end: int


def chunk_page(document_id: str, number: int, text: str, budget: int, count_tokens) -> list[Chunk]:
    """Paragraphs packed greedily up to ``budget`` tokens (the stand-in for documents/chunking.py)."""
    chunks: list[Chunk] = []
    start, parts, used, at = 0, [], 0, 0
    section = text.split("\n\n", 1)[0]

    def flush(end: int) -> None:
        body = "\n\n".join(parts)
        chunk_id = str(uuid.uuid5(uuid.UUID(document_id), f"{document_id}:{number}:{len(chunks)}"))
        chunks.append(Chunk(chunk_id, document_id, number, len(chunks), section, "text", body, start, end))

    for paragraph in text.split("\n\n"):
        n = count_tokens(paragraph)
        if parts and used + n > budget:
            flush(at - 2)
            start, parts, used = at, [], 0
        parts.append(paragraph)
        used += n
        at += len(paragraph) + 2
    if parts:
        flush(len(text))
    return chunks


# ------------------------------------------------------------------ ingestion


@dataclass
class Ingested:
    ids: dict[str, str]  # document name → document id
    chunks: list[Chunk]
    pages: int
    seconds: dict[str, float]  # chunk, embed, write


async def ingest(index: DocumentIndex, embedder: MiniLM, documents: Sequence[Document], budget: int,
                 out: Ingested) -> None:
    """Write ``documents`` into ``out`` (its ids filled as they are made: a failure still purges what was written)."""
    for document in documents:
        doc = out.ids[document.name] = str(uuid.uuid4())
        for number, text in enumerate(document.pages, start=1):
            t0 = time.perf_counter()
            chunks = chunk_page(doc, number, text, budget, embedder.count_tokens)
            t1 = time.perf_counter()
            vectors = embedder.embed([c.text for c in chunks])
            t2 = time.perf_counter()
            await index.write_page(doc, number, text, "text", chunks, vectors)
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

    def __str__(self) -> str:
        return f"{self.found / self.asked:6.3f} {self.reciprocal / self.asked:6.3f}"


async def quality(index: DocumentIndex, embedder: MiniLM, ing: Ingested, questions: Sequence[Question],
                  scopes: Sequence[Scope], k: int) -> dict[str, dict[str, Score]]:
    scores: dict[str, dict[str, Score]] = defaultdict(lambda: defaultdict(Score))
    vectors = embedder.embed([q.text for q in questions])
    for question, vector in zip(questions, vectors):
        keyword = await index.keyword(scopes, terms(question.text), k)
        near = await index.vector(scopes, vector, k)
        fused = rrf([keyword, near])  # FusedScore, the local reranker, keeps this order
        doc = ing.ids[question.document]
        for method, hits in (("bm25", keyword), ("vector", near), ("hybrid (RRF)", fused)):
            rank = rank_of(hits[:k], doc, question.page)
            scores[method][question.kind].add(rank)
            scores[method]["all"].add(rank)
    return scores


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
        print(f"ingestion (stand-in chunk + embed + write, text pages): {ing.pages / total:.1f} pages/s, "
              f"{len(ing.chunks)} chunks   [{shares}]   write alone {ing.pages / ing.seconds['write']:.1f} pages/s")
        names = {d.name: d for d in documents}
        scopes = [Scope(doc, len(names[name].pages), name) for name, doc in ing.ids.items()]

        scores = await quality(index, embedder, ing, questions, scopes, k)
        print(f"\nquality: recall@{TOP} MRR@{k}      {'all':>13} {'exact':>13} {'paraphrase':>13}")
        for method, by_kind in scores.items():
            print(f"  {method:<26} " + " ".join(f"{str(by_kind[kind]):>13}" for kind in ("all", "exact", "paraphrase")))
        best_single = max(scores["bm25"]["all"].found, scores["vector"]["all"].found)
        verdict = "beats" if scores["hybrid (RRF)"]["all"].found > best_single else "does NOT beat"
        print(f"  target: hybrid {verdict} both single methods on recall@{TOP}")

        print()
        for line in await bm25_reference(index, ing, questions, scopes, k):
            print(line)
        retriever = Retriever(index, embedder, FusedScore(), k=k, timeout_s=settings.search_timeout_s)
        await retriever.retrieve(questions[0].text, scopes, TOP)  # warm: statements prepared
        for line in await latency(retriever, cql, ing, questions, scopes):
            print(line)
    finally:
        await asyncio.gather(*(index.purge(doc) for doc in ing.ids.values()))
        cql.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--k", type=int, default=DocumentSettings().retrieve_k, help="candidates per search")
    args = parser.parse_args()
    asyncio.run(run(args.k))


if __name__ == "__main__":
    main()
