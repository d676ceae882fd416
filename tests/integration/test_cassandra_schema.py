"""The CQL schema on real Cassandra: applies, re-applies as a no-op, refuses edited history."""

from __future__ import annotations

from schemas import sealing

import shutil
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from parley.cassandra import connect
from parley.errors import MigrationError, StoreUnavailable
from parley.migrate import CQL_DIR, load, migrate
from parley.settings import CassandraSettings

TABLES = {
    "schema_migrations",
    "users",
    "api_keys",
    "conversations",
    "conversations_by_user",
    "messages",
    "summaries",
    "usage_by_user_day",
    "documents",
    "erasures",
    "documents_by_conversation",
    "document_pages",
    "document_page_stats",
    "document_chunks",
    "document_postings",
    "reply_readers",
    "user_memory",
    "usage_by_request",
    "requests_by_minute",
    "orgs",
    "org_policies",
    "users_by_org",
    "keys_by_user",
    "data_keys",
    "accounts_by_email",
    "accounts_by_user",
    "web_sessions",
    "web_sessions_by_user",
    "sign_in_attempts",
    "sign_in_familiar",
    "oidc_subjects",
    "oidc_subjects_by_user",
    "tool_turns",
    "tool_calls",
    "tool_asks",
    "org_tool_rules",
    "org_tools",
    "search_postings",
    "search_variants",
    "search_messages",
    "shares",
    "shares_by_conversation",
}


def _tables(session, keyspace: str) -> set[str]:
    rows = session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))
    return {r.table_name for r in rows}


def test_schema_applies_and_reapplies_as_a_no_op(cassandra, cassandra_settings: CassandraSettings) -> None:
    ks = cassandra_settings.keyspace
    assert _tables(cassandra, ks) == TABLES
    versions = [r.version for r in cassandra.execute(f"SELECT version FROM {ks}.schema_migrations")]
    assert sorted(versions) == [m.version for m in load()]
    assert migrate(cassandra, ks, cassandra_settings.replication) == []
    assert _tables(cassandra, ks) == TABLES


def test_tables_take_rows_and_vector_search_answers(cassandra, cassandra_settings: CassandraSettings) -> None:
    ks = cassandra_settings.keyspace
    doc = uuid.uuid4()
    ids = [uuid.uuid4() for _ in range(3)]
    for i, chunk_id in enumerate(ids):
        vec = [0.0] * 384
        vec[i] = 1.0
        cassandra.execute(
            f"INSERT INTO {ks}.document_chunks (document_id, chunk_id, page, text, embedding) VALUES (%s, %s, %s, %s, %s)",
            (doc, chunk_id, i + 1, f"chunk {i}", vec),
        )
    probe = [0.0] * 384
    probe[2] = 1.0
    rows = list(
        cassandra.execute(
            f"SELECT chunk_id, page FROM {ks}.document_chunks WHERE document_id = %s ORDER BY embedding ANN OF %s LIMIT 1",
            (doc, probe),
        )
    )
    assert [(r.chunk_id, r.page) for r in rows] == [(ids[2], 3)]


def test_an_applied_migration_that_changed_is_refused(tmp_path: Path, cassandra, cassandra_settings) -> None:
    edited = tmp_path / "cql"
    shutil.copytree(CQL_DIR, edited)
    first = sorted(edited.glob("*.cql"))[0]
    first.write_text(first.read_text() + "\n-- an innocent-looking edit\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(cassandra, cassandra_settings.keyspace, cassandra_settings.replication, edited)


def test_a_new_migration_applies_once(tmp_path: Path, cassandra, cassandra_settings) -> None:
    ks = f"{cassandra_settings.keyspace}_extra"
    extra = tmp_path / "cql"
    shutil.copytree(CQL_DIR, extra)
    (extra / "9000_probe.cql").write_text("CREATE TABLE IF NOT EXISTS probe (id int PRIMARY KEY);\n")
    try:
        first = migrate(cassandra, ks, cassandra_settings.replication, extra)
        assert [m.version for m in first][-1] == 9000
        assert migrate(cassandra, ks, cassandra_settings.replication, extra) == []
        assert "probe" in _tables(cassandra, ks)
    finally:
        cassandra.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=60)


def test_an_unreachable_cluster_is_a_clear_error(cassandra_settings: CassandraSettings) -> None:
    with pytest.raises(StoreUnavailable, match="PARLEY_CASSANDRA_HOSTS"):
        connect(replace(cassandra_settings, port=1), connect_timeout=1)


def test_async_cql_reads_every_page_and_names_the_settings_when_it_fails(cassandra, cassandra_settings: CassandraSettings) -> None:
    """The one async adapter of the gateway and the processors: a result larger than a page comes whole
    (the gateway's reads used to stop at the first), and a failure says which settings point where."""
    import asyncio

    from parley.cassandra import AsyncCql

    user = f"pages-{uuid.uuid4().hex[:8]}"
    ks = cassandra_settings.keyspace
    for i in range(11):
        cassandra.execute(f"INSERT INTO {ks}.user_memory (user_id, position, text) VALUES (%s, %s, %s)", (user, i, f"fact {i}"))
    cql = AsyncCql(cassandra_settings, cassandra)
    before = cassandra.default_fetch_size
    cassandra.default_fetch_size = 3  # four pages
    try:
        rows = asyncio.run(cql.run("SELECT text FROM {ks}.user_memory WHERE user_id = ?", (user,)))
    finally:
        cassandra.default_fetch_size = before
    assert sorted(r.text for r in rows) == sorted(f"fact {i}" for i in range(11))

    with pytest.raises(StoreUnavailable, match="PARLEY_CASSANDRA_HOSTS.*PARLEY_KEYSPACE.*InvalidRequest"):
        asyncio.run(cql.run("SELECT nothing FROM {ks}.no_such_table"))
    unreachable = AsyncCql(replace(cassandra_settings, port=1))
    with pytest.raises(StoreUnavailable, match="PARLEY_CASSANDRA_PORT"):
        asyncio.run(unreachable.run("SELECT now() FROM system.local"))


async def test_a_summary_written_twice_reads_back_once(cassandra, cassandra_settings: CassandraSettings) -> None:
    """A redelivered (or rebuilt) SummaryWritten rewrites its row to the same state: the covered
    ids are a frozen list, one cell (a non-frozen list gained the elements again on every rewrite)."""
    from schemas.events import SummaryWritten
    from streams.projection import writes_for
    from streams.store import Store
    from streams.summary_store import SummaryRows
    from streams.tree import Conversation

    cid, a, b = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    event = SummaryWritten(
        conversation_id=cid, user_id="u", summary_id="s1", through_message_id=b,
        covered_message_ids=[a, b], content="the summary", tokens=3, model="m",
    )
    store = Store(cassandra_settings)
    try:
        for _ in range(2):
            await store.write(writes_for(Conversation(cid), event, sealing.sealer()))
        [summary] = await SummaryRows(store).summaries(cid)
        [row] = await store.run("SELECT covered_ids FROM summaries WHERE conversation_id = ?", (uuid.UUID(cid),))
    finally:
        store.close()
    assert summary.covered == (a, b) and [str(m) for m in row.covered_ids] == [a, b]
