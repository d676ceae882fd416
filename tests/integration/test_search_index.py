"""Conversation search on real Cassandra: the processor's core writes the index from events, the gateway's
query finds words, typos and prefixes, replays change nothing, and deletes and erasure leave nothing."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from parley.cassandra import AsyncCql
from schemas import events as ev
from schemas import sealing
from streams.search_index import BUCKETS, TABLES, SearchIndex
from streams.search_indexer import SearchIndexer
from tools.erasure_audit import search_problems

pytestmark = pytest.mark.integration


@pytest.fixture
async def search(cassandra, cassandra_settings):
    cql = AsyncCql(cassandra_settings, cassandra)
    yield SearchIndex(cql, sealing.sealer()), cql


async def conversation(cql: AsyncCql, user: str, title: str, texts: list[str]) -> tuple[str, list[str], list[ev.Event]]:
    """The rows the materializer would hold (sealed) and the events the search processor reads."""
    cid = str(uuid.uuid4())
    at = datetime.now(timezone.utc)
    await cql.run(
        "INSERT INTO {ks}.conversations (conversation_id, user_id, title, created_at) VALUES (?, ?, ?, ?)",
        (uuid.UUID(cid), user, sealing.seal(user, title, at=sealing.cell_at("conversations", "title", cid)), at),
    )
    common = {"conversation_id": cid, "user_id": user}
    events: list[ev.Event] = [ev.ConversationCreated(**common, title=title)]
    ids = []
    for i, text in enumerate(texts):
        mid = str(uuid.uuid4())
        ids.append(mid)
        sealed = sealing.seal(user, text, at=sealing.cell_at("messages", "content", mid))
        await cql.run(
            "INSERT INTO {ks}.messages (conversation_id, message_id, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
            (uuid.UUID(cid), uuid.UUID(mid), "user", sealed, at),
        )
        events.append(ev.MessagePosted(**common, message_id=mid, client_message_id=f"k{i}", content=text))
    return cid, ids, events


async def rows_of(cql: AsyncCql, user: str) -> dict[str, list[tuple]]:
    out = {}
    for table in TABLES:
        rows = []
        for b in range(BUCKETS):
            rows += [tuple(r) for r in await cql.run(f"SELECT * FROM {{ks}}.{table} WHERE user_id = ? AND bucket = ?", (user, b))]
        out[table] = sorted(rows, key=repr)
    return out


async def test_words_typos_prefixes_and_titles_are_found_and_a_replay_changes_nothing(search) -> None:
    index, cql = search
    user, other = f"u_{uuid.uuid4().hex[:8]}", f"u_{uuid.uuid4().hex[:8]}"
    indexer = SearchIndexer(index)
    cid, (m1, m2), events = await conversation(
        cql, user, "Holiday planning", ["Where should we go this summer?", "I think the volcanic islands near Sicily are lovely"]
    )
    _, _, others = await conversation(cql, other, "Volcanic rocks", ["volcanic basalt samples"])
    for e in events + others:
        await indexer.handle(e)
    before = await rows_of(cql, user)
    assert before["search_postings"] and not any("volcan" in repr(r) for rows in before.values() for r in rows)  # keyed

    found = await index.search(user, "volcanic", 10)
    assert [(r.conversation_id, r.message_id) for r in found] == [(cid, m2)]
    assert "volcanic" in found[0].snippet and found[0].title == "Holiday planning" and found[0].role == "user"
    assert [r.message_id for r in await index.search(user, "volcnaic ", 10)] == [m2]  # a typo
    assert [r.message_id for r in await index.search(user, "sicil", 10)] == [m2]  # still typing
    assert [r.message_id for r in await index.search(user, "islands sicily", 10)] == [m2]
    titled = await index.search(user, "holiday", 10)
    assert [(r.conversation_id, r.message_id) for r in titled] == [(cid, None)] and titled[0].snippet == "Holiday planning"
    assert await index.search(user, "basalt", 10) == []  # another user's words

    for e in events:  # redelivered: the same rows
        await indexer.handle(e)
    assert await rows_of(cql, user) == before

    # A message's text changes (a reply restarted): the old words no longer find it.
    await indexer.handle(ev.MessagePosted(conversation_id=cid, user_id=user, message_id=m2, client_message_id="k1",
                                          content="Actually the fjords of Norway"))
    assert await index.search(user, "volcanic", 10) == []
    assert [r.message_id for r in await index.search(user, "fjords", 10)] == [m2]
    # Withdrawn (moderated): gone, and a late rewrite does not bring it back.
    await indexer.handle(ev.GenerationModerated(conversation_id=cid, user_id=user, request_id=m2, parent_id=m1,
                                                direction="output", stage="final", action="cut"))
    await indexer.handle(ev.GenerationCompleted(conversation_id=cid, user_id=user, request_id=m2, parent_id=m1,
                                                finish_reason="stop", content="Actually the fjords of Norway"))
    assert await index.search(user, "fjords", 10) == []


async def test_a_deleted_conversation_is_gone_at_once_and_erasure_leaves_no_row(search, cassandra, cassandra_settings) -> None:
    index, cql = search
    user = f"u_{uuid.uuid4().hex[:8]}"
    indexer = SearchIndexer(index)
    cid, _, events = await conversation(cql, user, "Recipes", ["A saffron risotto for four"])
    kept, _, more = await conversation(cql, user, "More recipes", ["saffron buns"])
    for e in events + more:
        await indexer.handle(e)
    assert {r.conversation_id for r in await index.search(user, "saffron", 10)} == {cid, kept}

    # The gateway writes the deleted mark through: the next query leaves it out, before the processor runs.
    await cql.run("UPDATE {ks}.conversations SET deleted_at = ? WHERE conversation_id = ?",
                  (datetime.now(timezone.utc), uuid.UUID(cid)))
    assert [r.conversation_id for r in await index.search(user, "saffron", 10)] == [kept]
    deleted = ev.ConversationDeleted(conversation_id=cid, user_id=user)
    await indexer.handle(deleted)
    await indexer.handle(events[1])  # a late redelivery of its message adds nothing back
    postings = (await rows_of(cql, user))["search_postings"]
    assert {r[3] for r in postings} == {uuid.UUID(kept)}

    assert search_problems(cassandra, cassandra_settings.keyspace, user)  # the audit sees what is left
    await index.purge_user(user)
    assert await index.rows_left(user) == 0
    assert search_problems(cassandra, cassandra_settings.keyspace, user) == []
