"""AsyncCql's deadline (parley/cassandra.py): one statement, its first prepare included, fails as
StoreUnavailable once it has taken ``deadline_s``, instead of waiting out each of the driver's own bounds."""

from __future__ import annotations

import asyncio

import pytest

from parley.cassandra import AsyncCql
from parley.errors import StoreUnavailable
from parley.settings import CassandraSettings


async def test_a_statement_past_its_deadline_is_unavailable_at_once() -> None:
    cql = AsyncCql(CassandraSettings(), session=object(), deadline_s=0.05)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable, match="no answer within"):  # not the sleep's end, 5 s later
        await cql._bounded(asyncio.sleep(5))


async def test_without_a_deadline_the_statement_takes_what_it_takes() -> None:
    cql = AsyncCql(CassandraSettings(), session=object())  # type: ignore[arg-type]
    assert await cql._bounded(asyncio.sleep(0.01, result="rows")) == "rows"
