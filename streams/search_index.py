"""Conversation search in Cassandra: the search processor writes it, the gateway queries it.

Tables (schemas/cql/0022_search.cql), every one partitioned by (user_id, bucket) so that a
user's rows are ``BUCKETS`` partitions per table, whatever they write, and an erasure deletes
exactly those:

- ``search_postings`` (term, conversation_id, message_id): tf and the text's length;
- ``search_variants`` (variant, term): a prefix or deletion form → the posting term of a word
  the user has written (streams/search_text.py), with the word's length;
- ``search_messages`` (conversation_id, message_id): the terms each text posted (what a rewrite
  or a delete removes) and its state; a conversation's deleted mark is its row under ``NIL``.

Every term and variant is keyed by the owner's data key (``sealing.blind``, DESIGN.md §12):
the rows hold no word, and once the key is destroyed no query can be keyed to meet them.
A posting's bucket is a hash of its keyed term, a text's of its conversation id.

A query is three round trips deep, each fanned out in parallel: the query words' postings and
their vocabulary forms; the postings of the words those forms reached; the best conversations'
rows (owner, deleted mark, title: one read) and their best messages (for the snippet, opened with the
owner's key). A deleted conversation leaves the results at once: its mark is written through by
the gateway and checked here, before the processor drops its rows.

Errors: Cassandra's become ``parley.errors.StoreUnavailable`` (``AsyncCql``).
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from parley.cassandra import AsyncCql
from schemas.sealing import Sealer, cell_at, open_text, sealer
from streams.search_rank import EXACT, FUZZY, PREFIX, Hit, Posting, rank
from streams.search_text import QueryWord, indexed, query, snippet

#: Partitions per user per table.
BUCKETS = 16
#: A conversation's deleted mark, in ``search_messages``.
NIL = uuid.UUID(int=0)
INDEXED, WITHDRAWN, DELETED = "indexed", "withdrawn", "deleted"
#: Terms a typed prefix or a typo may reach (a prefix: the shortest words first).
EXPANSIONS = 16
#: Postings read per term: a word in more messages than this counts only its first ones.
POSTINGS_MAX = 5000
#: Batches of ``limit`` hits read at most to fill the results when some conversations were deleted.
BATCHES = 3
#: Writes in flight at once for one text.
WRITES_IN_FLIGHT = 64
#: Vocabulary words remembered as written (per process), so a common word is not rewritten per message.
VOCABULARY_SEEN = 200_000


@dataclass(frozen=True)
class Result:
    conversation_id: str
    message_id: str | None
    title: str
    snippet: str
    role: str | None
    score: float
    created_at: datetime | None

    def public(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id, "message_id": self.message_id, "title": self.title,
            "snippet": self.snippet, "role": self.role, "score": round(self.score, 6),
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }


def bucket(value: str) -> int:
    return zlib.crc32(value.encode()) % BUCKETS


class SearchIndex:
    def __init__(self, cql: AsyncCql, keys: Sealer | None = None) -> None:
        self._cql = cql
        self._keys = keys
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def _key(self, user_id: str, form: str) -> str:
        """``form`` keyed by the owner's data key ("" once they are erased: nothing is written or found)."""
        return (self._keys or sealer()).blind(user_id, "search:" + form)

    # ------------------------------------------------------------------ writes (the search processor)

    async def index(self, user_id: str, conversation_id: str, message_id: str, text: str) -> None:
        """Post ``text``'s terms for the message, remove those it no longer has, and add its words'
        forms to the vocabulary. The message's row names the union of old and new terms while the
        postings change, so a redelivery after a crash removes what a first try left behind."""
        conv, mid = uuid.UUID(conversation_id), uuid.UUID(message_id)
        rows = await self._texts(user_id, conv, (NIL, mid))
        if NIL in rows or rows.get(mid, (set(), INDEXED))[1] == WITHDRAWN:
            return
        had = rows.get(mid, (set(), INDEXED))[0]
        found = indexed(text)
        keyed = {self._key(user_id, t): (t, n) for t, n in found.tf.items()}
        if "" in keyed:
            return  # the owner is erased
        new = set(keyed)
        if new - had:
            await self._text_row(user_id, conv, mid, had | new, INDEXED)
        writes: list[tuple[str, tuple[Any, ...]]] = [_delete_posting(user_id, t, conv, mid) for t in had - new]
        writes += [(_INSERT_POSTING, (user_id, bucket(k), k, conv, mid, n, found.length)) for k, (_, n) in keyed.items()]
        words = [(k, t) for k, (t, _) in keyed.items() if (user_id, k) not in self._seen]
        for k, t in words:
            chars, forms = found.vocabulary[t]
            writes += [(_INSERT_VARIANT, (user_id, bucket(v), v, k, chars)) for v in (self._key(user_id, f) for f in forms)]
        await _bounded(self._cql.run(cql, values) for cql, values in writes)
        self._remember(user_id, (k for k, _ in words))  # written: a later message with them skips their forms
        if had - new:
            await self._text_row(user_id, conv, mid, new, INDEXED)

    async def withdraw(self, user_id: str, conversation_id: str, message_id: str) -> None:
        conv, mid = uuid.UUID(conversation_id), uuid.UUID(message_id)
        had = (await self._texts(user_id, conv, (mid,))).get(mid, (set(), INDEXED))[0]
        await self._text_row(user_id, conv, mid, had, WITHDRAWN)
        await _bounded(self._cql.run(*_delete_posting(user_id, t, conv, mid)) for t in had)
        await self._text_row(user_id, conv, mid, set(), WITHDRAWN)

    async def drop(self, user_id: str, conversation_id: str) -> None:
        conv = uuid.UUID(conversation_id)
        await self._text_row(user_id, conv, NIL, set(), DELETED)
        rows = await self._texts(user_id, conv, None)
        await _bounded(
            self._cql.run(*_delete_posting(user_id, t, conv, mid)) for mid, (terms, _) in rows.items() for t in terms
        )
        await _bounded(
            self._cql.run(
                "DELETE FROM {ks}.search_messages WHERE user_id = ? AND bucket = ? AND conversation_id = ? AND message_id = ?",
                (user_id, bucket(str(conv)), conv, mid),
            )
            for mid in rows if mid != NIL
        )

    async def purge_user(self, user_id: str) -> None:
        """Every search row of the user: ``BUCKETS`` partitions of each table (the erasure job)."""
        await _bounded(
            self._cql.run(f"DELETE FROM {{ks}}.{table} WHERE user_id = ? AND bucket = ?", (user_id, b))
            for table in TABLES for b in range(BUCKETS)
        )

    async def rows_left(self, user_id: str) -> int:
        """How many search rows the user still has (``parley audit erasure``)."""
        counts = await asyncio.gather(*(
            self._cql.run(f"SELECT COUNT(*) AS n FROM {{ks}}.{table} WHERE user_id = ? AND bucket = ?", (user_id, b))
            for table in TABLES for b in range(BUCKETS)
        ))
        return sum(rows[0].n for rows in counts)

    def _remember(self, user_id: str, terms: Iterable[str]) -> None:
        for term in terms:
            self._seen[(user_id, term)] = None
            self._seen.move_to_end((user_id, term))
        while len(self._seen) > VOCABULARY_SEEN:
            self._seen.popitem(last=False)

    async def _texts(
        self, user_id: str, conv: uuid.UUID, ids: Sequence[uuid.UUID] | None
    ) -> dict[uuid.UUID, tuple[set[str], str]]:
        where = "" if ids is None else f" AND message_id IN ({', '.join('?' for _ in ids)})"
        rows = await self._cql.run(
            "SELECT message_id, terms, state FROM {ks}.search_messages WHERE user_id = ? AND bucket = ? AND conversation_id = ?"
            + where,
            (user_id, bucket(str(conv)), conv, *(ids or ())),
        )
        return {r.message_id: (set(r.terms or ()), r.state or INDEXED) for r in rows}

    async def _text_row(self, user_id: str, conv: uuid.UUID, mid: uuid.UUID, terms: set[str], state: str) -> None:
        await self._cql.run(
            "INSERT INTO {ks}.search_messages (user_id, bucket, conversation_id, message_id, terms, state) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (user_id, bucket(str(conv)), conv, mid, terms, state),
        )

    # ------------------------------------------------------------------ the query (the gateway)

    async def search(self, user_id: str, text: str, limit: int) -> list[Result]:
        """The user's conversations that ``text`` finds, best first, at most ``limit``; never a deleted one."""
        wanted = query(text)
        if not wanted:
            return []
        exact = [self._key(user_id, w.term) for w in wanted]
        forms = [self._forms(user_id, w) for w in wanted]
        lookups = {k for k in exact} | {f for word in forms for f in word}
        found = dict(zip(lookups, await asyncio.gather(*(
            self._postings(user_id, k) if k in exact else self._variants(user_id, k) for k in lookups
        ))))
        # One word found exactly in more conversations than are shown: its typos' neighbours would all rank
        # below those (quality first), so their postings are not read.
        enough = len(wanted) == 1 and len({p.conversation_id for p in found[exact[0]]}) >= limit * BATCHES
        reached: list[dict[str, str]] = []
        for k, word_forms in zip(exact, forms):
            how: dict[str, str] = {}
            for form, kind in word_forms.items():
                if enough and kind == FUZZY:
                    continue
                rows = sorted(found[form], key=lambda r: (r.chars, r.term))
                for term in list(dict.fromkeys(r.term for r in rows))[:EXPANSIONS]:
                    if kind == PREFIX or how.get(term) != PREFIX:
                        how[term] = kind
            how[k] = EXACT
            reached.append(how)
        more = {t for how in reached for t in how} - found.keys()
        found.update(zip(more, await asyncio.gather(*(self._postings(user_id, t) for t in more))))
        hits = rank([{t: (kind, found[t]) for t, kind in how.items()} for how in reached])
        return await self._results(user_id, hits, wanted, limit)

    def _forms(self, user_id: str, w: QueryWord) -> dict[str, str]:
        forms = {self._key(user_id, f): FUZZY for f in w.fuzzy}
        if w.prefix is not None:
            forms[self._key(user_id, w.prefix)] = PREFIX
        return forms

    async def _postings(self, user_id: str, term: str) -> list[Posting]:
        rows = await self._cql.run(
            "SELECT conversation_id, message_id, tf, length FROM {ks}.search_postings "
            "WHERE user_id = ? AND bucket = ? AND term = ? LIMIT ?",
            (user_id, bucket(term), term, POSTINGS_MAX),
        )
        return [Posting(str(r.conversation_id), str(r.message_id), r.tf or 1, r.length or 1) for r in rows]

    async def _variants(self, user_id: str, variant: str) -> list[Any]:
        return await self._cql.run(
            "SELECT term, chars FROM {ks}.search_variants WHERE user_id = ? AND bucket = ? AND variant = ? LIMIT ?",
            (user_id, bucket(variant), variant, EXPANSIONS * 8),
        )

    async def _results(self, user_id: str, hits: Sequence[Hit], wanted: list[QueryWord], limit: int) -> list[Result]:
        """The first ``limit`` hits whose conversation is the user's and not deleted, with their snippets: the
        conversation rows of a batch of hits in one read, then the survivors' messages, a batch more only when
        some were deleted."""
        out: list[Result] = []
        for start in range(0, min(len(hits), limit * BATCHES), limit):
            conversations = await self._conversations([h.conversation_id for h in hits[start:start + limit]])
            live = [
                (h, c) for h in hits[start:start + limit]
                if (c := conversations.get(h.conversation_id)) is not None and c.user_id == user_id and c.deleted_at is None
            ][: limit - len(out)]
            messages = await asyncio.gather(*(self._message(h.conversation_id, h.message_id) for h, _ in live))
            for (hit, conv), msg in zip(live, messages):
                title = open_text(conv.title, at=cell_at("conversations", "title", conv.conversation_id)) or ""
                if msg is None:  # the title matched (or the message row is not written yet)
                    out.append(Result(hit.conversation_id, None, title, snippet(title, wanted), None, hit.score, conv.created_at))
                    continue
                content = open_text(msg.content, at=cell_at("messages", "content", msg.message_id)) or ""
                out.append(Result(
                    hit.conversation_id, hit.message_id, title, snippet(content, wanted), msg.role, hit.score, msg.created_at
                ))
            if len(out) == limit:
                break
        return out

    async def _conversations(self, ids: Sequence[str]) -> dict[str, Any]:
        rows = await self._cql.run(
            "SELECT conversation_id, user_id, title, deleted_at, created_at FROM {ks}.conversations "
            f"WHERE conversation_id IN ({', '.join('?' for _ in ids)})",
            tuple(uuid.UUID(i) for i in ids),
        ) if ids else []
        return {str(r.conversation_id): r for r in rows}

    async def _message(self, conversation_id: str, message_id: str | None) -> Any:
        if message_id is None:
            return None
        rows = await self._cql.run(
            "SELECT message_id, role, content, created_at FROM {ks}.messages WHERE conversation_id = ? AND message_id = ?",
            (uuid.UUID(conversation_id), uuid.UUID(message_id)),
        )
        return rows[0] if rows and rows[0].role is not None else None


TABLES = ("search_postings", "search_variants", "search_messages")
_INSERT_POSTING = (
    "INSERT INTO {ks}.search_postings (user_id, bucket, term, conversation_id, message_id, tf, length) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_VARIANT = "INSERT INTO {ks}.search_variants (user_id, bucket, variant, term, chars) VALUES (?, ?, ?, ?, ?)"


def _delete_posting(user_id: str, term: str, conv: uuid.UUID, mid: uuid.UUID) -> tuple[str, tuple[Any, ...]]:
    return (
        "DELETE FROM {ks}.search_postings WHERE user_id = ? AND bucket = ? AND term = ? AND conversation_id = ? "
        "AND message_id = ?",
        (user_id, bucket(term), term, conv, mid),
    )


async def _bounded(calls: Iterable[Awaitable[Any]]) -> None:
    gate = asyncio.Semaphore(WRITES_IN_FLIGHT)

    async def one(call: Awaitable[Any]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))
