"""The materializer's loop without Kafka: an unreachable store stalls it, never loses an event."""

from __future__ import annotations

import uuid

import pytest

from parley.errors import StoreUnavailable
from schemas import events as ev
from streams.materializer import Materializer
from streams.projection import Write
from streams.settings import MaterializerSettings
from streams.tree import Conversation, empty
from tests.unit.test_streams_tree import CID, conversation_log


class FlakyStore:
    """Fails the first ``failures`` calls, like Cassandra during a restart."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.written: list[Write] = []
        self.loads = 0

    def _maybe_fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("down")

    async def load(self, conversation_id: str) -> Conversation:
        self._maybe_fail()
        self.loads += 1
        return empty(conversation_id)

    async def write(self, writes: list[Write]) -> None:
        self._maybe_fail()
        self.written += writes


async def test_outage_is_retried_until_the_writes_land() -> None:
    log, _ = conversation_log()
    store = FlakyStore(failures=3)  # the load fails twice, then a write
    m = Materializer(MaterializerSettings(retry_max_s=0.2), store)
    all_writes = []
    for e in log:
        all_writes += await m.handle(e)
    assert store.failures == 0 and store.loads == 1
    assert store.written == all_writes and all_writes


async def test_events_of_other_topics_write_nothing_and_bad_ids_raise() -> None:
    m = Materializer(MaterializerSettings(), FlakyStore(failures=0))
    chunk = ev.TokenChunk(conversation_id=CID, user_id="u", request_id=str(uuid.uuid4()), seq=0)
    assert await m.handle(chunk) == []
    with pytest.raises(ValueError):
        await m.handle(ev.LeafSelected(conversation_id="nope", user_id="u", leaf_id=str(uuid.uuid4())))
