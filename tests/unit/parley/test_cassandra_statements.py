"""How AsyncCql prepares statements (parley/cassandra.py), without a node: which may be speculated on a
second node, and a prepare that a hung node never answers is asked of another."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from cassandra import OperationTimedOut

from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings


class HungFirst:
    """A session whose first ``hung`` prepares time out, as a paused coordinator's do."""

    def __init__(self, hung: int) -> None:
        self.hung = hung
        self.asked: list[str] = []

    def prepare(self, text: str) -> Any:
        self.asked.append(text)
        if len(self.asked) <= self.hung:
            raise OperationTimedOut("no answer")
        return SimpleNamespace(text=text, is_idempotent=False)


async def test_only_reads_may_run_twice() -> None:
    cql = AsyncCql(CassandraSettings(keyspace="ks"), session=HungFirst(0))  # type: ignore[arg-type]
    select = await cql._statement(await cql.session(), "  select v FROM {ks}.t WHERE k = ?")
    insert = await cql._statement(await cql.session(), "INSERT INTO {ks}.t (k, v) VALUES (?, ?) IF NOT EXISTS")
    assert select.text.endswith("FROM ks.t WHERE k = ?")
    assert (select.is_idempotent, insert.is_idempotent) == (True, False)


async def test_a_prepare_a_hung_node_does_not_answer_is_asked_again() -> None:
    session = HungFirst(2)
    cql = AsyncCql(CassandraSettings(keyspace="ks"), session=session)  # type: ignore[arg-type]
    await cql._statement(session, "SELECT v FROM {ks}.t")  # type: ignore[arg-type]
    assert len(session.asked) == 3
    with pytest.raises(OperationTimedOut):  # three hung answers: the caller's StoreUnavailable
        await AsyncCql(CassandraSettings(keyspace="ks"), session=HungFirst(3))._statement(HungFirst(3), "SELECT 1")  # type: ignore[arg-type]
