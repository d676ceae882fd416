"""Conversation search latency for one user with 1,000 conversations, next to baselines of the same run.

One user's history is written into the running Cassandra: ``--conversations`` conversations of
``--messages`` messages each (12 to 40 words drawn Zipf-like from a 3,000-word synthetic vocabulary,
so common words are in thousands of messages and rare ones in a few), their rows as the
materializer writes them (titles and text sealed under the user's data key) and their search rows
through ``SearchIndex.index``, the code the search processor runs. Then, for each kind of query
the page sends while someone types, ``--queries`` different ones timed through
``SearchIndex.search`` as GET /v1/search calls it, at the page's limit (10) and the API's default (20),
after one untimed pass of every query (statements prepared, the fill's compactions begun):

- a word (a mid-frequency one), two words, a rare word;
- a prefix of 4 letters (the last word still being typed);
- a typo (two neighbouring letters swapped in a word of 6 letters or more).

Baselines, in the same process against the same Cassandra: the conversation list as GET
/v1/conversations reads it (``gateway.store.Store.conversations_of``: one partition, 100 titles
opened) and a bare single-partition read of one message row. Everything written is deleted after.

Run: ``python -m bench.search [--conversations 1000] [--messages 10] [--queries 40]`` with Cassandra up
(``make setup``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone

from gateway.store import Store
from parley import keys
from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings, from_env
from schemas import sealing
from streams.search_index import BUCKETS, SearchIndex

VOCABULARY = 3000
WRITERS = 24  # texts indexed at once while filling


def vocabulary(rng: random.Random) -> list[str]:
    """Pronounceable made-up words, 3 to 10 letters, none a stopword or a stem of another by chance (mostly)."""
    onsets, vowels = "b c d f g h j k l m n p r s t v w z br cl dr gr pl st tr".split(), "a e i o u ai ea ou".split()
    words: set[str] = set()
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 4)))
        if 3 <= len(word) <= 10:
            words.add(word)
    return sorted(words)


def text(rng: random.Random, words: list[str], weights: list[float], n: int) -> str:
    return " ".join(rng.choices(words, weights, k=n)).capitalize() + "."


async def fill(index: SearchIndex, cql: AsyncCql, user: str, conversations: int, messages: int,
               rng: random.Random, words: list[str], weights: list[float]) -> tuple[list[tuple[str, str]], float]:
    """Writes the user's rows and search index; returns (conversation, message) ids and the seconds indexing took."""
    gate = asyncio.Semaphore(WRITERS)
    ids: list[tuple[str, str]] = []
    start = datetime.now(timezone.utc) - timedelta(days=400)
    jobs: list[Callable[[], Awaitable[None]]] = []
    for c in range(conversations):
        cid = str(uuid.uuid4())
        at = start + timedelta(hours=c)
        title = text(rng, words, weights, rng.randint(2, 5)).rstrip(".")
        sealed_title = sealing.seal(user, title, at=sealing.cell_at("conversations", "title", cid), deterministic=True)
        listed = sealing.seal(user, title, at=sealing.cell_at("conversations_by_user", "title", cid), deterministic=True)
        await cql.run(
            "INSERT INTO {ks}.conversations (conversation_id, user_id, title, created_at) VALUES (?, ?, ?, ?)",
            (uuid.UUID(cid), user, sealed_title, at),
        )
        await cql.run(
            "INSERT INTO {ks}.conversations_by_user (user_id, created_at, conversation_id, title) VALUES (?, ?, ?, ?)",
            (user, at, uuid.UUID(cid), listed),
        )
        jobs.append(lambda cid=cid, title=title: index.index(user, cid, cid, title))
        for m in range(messages):
            mid = str(uuid.uuid4())
            body = text(rng, words, weights, rng.randint(12, 40))
            sealed = sealing.seal(user, body, at=sealing.cell_at("messages", "content", mid), deterministic=True)
            await cql.run(
                "INSERT INTO {ks}.messages (conversation_id, message_id, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
                (uuid.UUID(cid), uuid.UUID(mid), "user" if m % 2 == 0 else "assistant", sealed, at + timedelta(minutes=m)),
            )
            ids.append((cid, mid))
            jobs.append(lambda cid=cid, mid=mid, body=body: index.index(user, cid, mid, body))

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(j) for j in jobs))
    return ids, time.perf_counter() - t0


def queries(rng: random.Random, words: list[str], n: int) -> dict[str, list[str]]:
    mid = words[len(words) // 20: len(words) // 4]  # by rank: neither the commonest nor the rarest
    rare = words[len(words) // 2:]
    long = [w for w in mid if len(w) >= 6]
    out: dict[str, list[str]] = {"a word": [], "two words": [], "a rare word": [], "a prefix (typing)": [], "a typo": []}
    for _ in range(n):
        out["a word"].append(rng.choice(mid) + " ")
        out["two words"].append(f"{rng.choice(mid)} {rng.choice(mid)} ")
        out["a rare word"].append(rng.choice(rare) + " ")
        out["a prefix (typing)"].append(rng.choice(long)[:4])
        w = rng.choice(long)
        i = rng.randrange(1, len(w) - 2)
        out["a typo"].append(w[:i] + w[i + 1] + w[i] + w[i + 2:] + " ")
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000 if len(values) > 1 else values[0] * 1000


async def timed(call: Callable[[], Awaitable[object]]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = await call()
    return time.perf_counter() - t0, out


async def run(conversations: int, messages: int, n: int, limits: list[int]) -> None:
    keys.install_from_env()
    cql = AsyncCql(from_env(CassandraSettings))
    index, store = SearchIndex(cql, sealing.sealer()), Store(cql)
    user = f"bench_search_{uuid.uuid4().hex[:8]}"
    rng = random.Random(38)
    words = vocabulary(rng)
    rng.shuffle(words)
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf: the list's order is the frequency order
    await sealing.prefetch([user], create=True)
    ids: list[tuple[str, str]] = []
    try:
        ids, took = await fill(index, cql, user, conversations, messages, rng, words, weights)
        texts = conversations * (messages + 1)
        print(f"one user: {conversations} conversations x {messages} messages; indexed {texts} texts in {took:.1f} s "
              f"({texts / took:.0f} texts/s through SearchIndex.index, {WRITERS} at once)")
        counted = await asyncio.gather(*(
            cql.run("SELECT COUNT(*) AS n FROM {ks}.search_postings WHERE user_id = ? AND bucket = ?", (user, b))
            for b in range(BUCKETS)
        ))
        postings = sum(rows[0].n for rows in counted)
        left = await index.rows_left(user)
        print(f"rows: {postings} postings ({postings / texts:.1f} per text), {left - postings} vocabulary and text rows")
        await store.conversations_of(user)
        cid, mid = ids[0]
        asked = queries(rng, words, n)
        for qs in asked.values():  # warm, untimed: statements prepared, the fill's compactions under way
            for q in qs:
                await index.search(user, q, max(limits))
        for limit in limits:
            print(f"\n{f'query (limit {limit})':<22}{'p50 ms':>8}{'p95 ms':>8}{'results':>9}")
            for kind, qs in asked.items():
                times, found = [], []
                for q in qs:
                    seconds, results = await timed(lambda q=q: index.search(user, q, limit))
                    times.append(seconds)
                    found.append(len(results))  # type: ignore[arg-type]
                print(f"{kind:<22}{pct(times, 50):8.1f}{pct(times, 95):8.1f}{statistics.mean(found):9.1f}")
        lists, bare = [], []
        for _ in range(n):
            lists.append((await timed(lambda: store.conversations_of(user)))[0])
            bare.append((await timed(lambda: cql.run(
                "SELECT content FROM {ks}.messages WHERE conversation_id = ? AND message_id = ?",
                (uuid.UUID(cid), uuid.UUID(mid)))))[0])
        print(f"\n{'baseline: the list':<22}{pct(lists, 50):8.1f}{pct(lists, 95):8.1f}   (GET /v1/conversations' read: 100 titles)")
        print(f"{'baseline: one row':<22}{pct(bare, 50):8.1f}{pct(bare, 95):8.1f}   (a single-partition read)")
    finally:
        await index.purge_user(user)
        await cql.run("DELETE FROM {ks}.conversations_by_user WHERE user_id = ?", (user,))
        for cid in {c for c, _ in ids}:
            await cql.run("DELETE FROM {ks}.messages WHERE conversation_id = ?", (uuid.UUID(cid),))
            await cql.run("DELETE FROM {ks}.conversations WHERE conversation_id = ?", (uuid.UUID(cid),))
        cql.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10, help="messages per conversation")
    parser.add_argument("--queries", type=int, default=40, help="queries of each kind")
    parser.add_argument("--limits", default="10,20", help="results asked for: the page's 10, the API's default 20")
    args = parser.parse_args()
    asyncio.run(run(args.conversations, args.messages, args.queries, [int(x) for x in args.limits.split(",")]))


if __name__ == "__main__":
    main()
