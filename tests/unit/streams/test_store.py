"""The processors' Cassandra writer: one unlogged batch per partition, the partitions concurrently."""

from __future__ import annotations

from schemas import sealing

import asyncio
import uuid
from typing import Any

from parley.settings import CassandraSettings
from schemas.events import MemoryUpdated
from streams import memory
from streams.projection import Write, cql
from streams.store import Store, by_partition

A, B = uuid.uuid4(), uuid.uuid4()


def _w(table: str, cid: Any, n: int) -> Write:
    return Write(table, (("conversation_id", cid), ("message_id", n)), (("content", f"t{n}"),), 1_000 + n)


def test_writes_group_by_partition_in_order_and_a_long_group_is_split() -> None:
    writes = [_w("messages", A, 1), _w("conversations", B, 2), _w("conversations", A, 3), _w("messages", B, 4)]
    assert by_partition(writes) == [[writes[0], writes[2]], [writes[1], writes[3]]]
    many = [_w("messages", A, n) for n in range(5)]
    assert by_partition(many, most=2) == [many[0:2], many[2:4], many[4:5]]
    assert by_partition([]) == []


class _FakeCql:
    def __init__(self) -> None:
        self.requests: list[list[tuple[str, tuple[Any, ...]]]] = []

    async def run(self, text: str, values: tuple[Any, ...] = ()) -> list[Any]:
        self.requests.append([(text, values)])
        return []

    async def run_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        self.requests.append(list(statements))


def _store() -> tuple[Store, _FakeCql]:
    store = Store(CassandraSettings())
    fake = _FakeCql()
    store._cql = fake  # type: ignore[assignment]
    return store, fake


def test_a_write_sends_one_request_per_partition() -> None:
    store, fake = _store()
    writes = [_w("messages", A, 1), _w("conversations", A, 2), _w("conversations", B, 3)]
    asyncio.run(store.write(writes))
    assert sorted(fake.requests, key=len) == [
        [(cql(writes[2].shape), writes[2].values)],
        [(cql(writes[0].shape), writes[0].values), (cql(writes[1].shape), writes[1].values)],
    ]


def test_a_memory_snapshot_is_one_batch_of_the_users_partition() -> None:
    store, fake = _store()
    event = MemoryUpdated(user_id="u1", facts=[memory.fact("u1", "likes tea", sealing.sealer()), memory.fact("u1", "in Oslo", sealing.sealer())])
    asyncio.run(store.write_memory(event))
    assert fake.requests == [[(s.cql, s.values) for s in memory.writes_for(event, sealing.sealer())]]
