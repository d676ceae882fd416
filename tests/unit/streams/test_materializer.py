"""The materializer's loop without Kafka: an unreachable store stalls it, never loses an event."""

from __future__ import annotations

from schemas import sealing

import uuid

import pytest

from parley.errors import StoreUnavailable
from schemas import events as ev
from streams.checkpoint import StoredReply
from streams.materializer import Checkpoints, Materializer
from streams.projection import Write
from streams.settings import MaterializerSettings
from streams.tree import Conversation, empty
from tests.unit.streams.test_tree import CID, conversation_log


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
    m = Materializer(MaterializerSettings(retry_max_s=0.2), store, sealing.UNSEALED)
    all_writes = []
    for e in log:
        all_writes += await m.handle(e)
    assert store.failures == 0 and store.loads == 1
    assert store.written == all_writes and all_writes


async def test_events_of_other_topics_write_nothing_and_bad_ids_raise() -> None:
    m = Materializer(MaterializerSettings(), FlakyStore(failures=0), sealing.UNSEALED)
    chunk = ev.TokenChunk(conversation_id=CID, user_id="u", request_id=str(uuid.uuid4()), seq=0)
    assert await m.handle(chunk) == []
    with pytest.raises(ValueError):
        await m.handle(ev.LeafSelected(conversation_id="nope", user_id="u", leaf_id=str(uuid.uuid4())))


class ReplyRows(FlakyStore):
    """A messages table of reply texts, as the checkpoints see it."""

    def __init__(self, failures: int, stored: dict[str, StoredReply] | None = None) -> None:
        super().__init__(failures)
        self.stored = stored or {}
        self.reads = 0

    async def reply(self, conversation_id: str, message_id: str) -> StoredReply | None:
        self._maybe_fail()
        self.reads += 1
        return self.stored.get(message_id)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _chunk(rid: str, seq: int, text: str, offset: int, **kw: object) -> ev.TokenChunk:
    return ev.TokenChunk(conversation_id=CID, user_id="u", request_id=rid, seq=seq, text=text, offset_chars=offset, **kw)  # type: ignore[arg-type]


async def test_checkpoints_write_through_outages_and_the_timer_writes_what_is_pending() -> None:
    rid, clock, rows = str(uuid.uuid4()), Clock(), ReplyRows(failures=1)
    cps = Checkpoints(MaterializerSettings(retry_max_s=0.2), rows, sealing.UNSEALED, clock)
    [first] = await cps.handle(_chunk(rid, 0, "Hello", 0))
    assert dict(first.cells)["content"] == "Hello" and rows.written == [first]  # after one failed attempt
    clock.now = 0.5
    assert await cps.handle(_chunk(rid, 1, ", world", 5)) == []
    assert await cps.flush() == []
    clock.now = 1.0
    [second] = await cps.flush()
    assert dict(second.cells)["content"] == "Hello, world"
    assert await cps.handle(_chunk(rid, 2, "", 12, finish_reason="stop")) == []
    assert await cps.flush(force=True) == []


async def test_checkpoints_resume_from_the_row_after_a_restart_and_refuse_other_events() -> None:
    rid = str(uuid.uuid4())
    rows = ReplyRows(failures=0, stored={rid: StoredReply("Hello", 1, "streaming")})
    cps = Checkpoints(MaterializerSettings(), rows, sealing.UNSEALED, Clock())
    [w] = await cps.handle(_chunk(rid, 1, ", world", 5))
    assert dict(w.cells)["content"] == "Hello, world" and rows.reads == 1
    with pytest.raises(TypeError):
        await cps.handle(ev.LeafSelected(conversation_id=CID, user_id="u", leaf_id=rid))
    with pytest.raises(ValueError):
        await cps.handle(_chunk("not-a-uuid", 0, "x", 0))


def test_checkpoint_settings_name_what_to_change() -> None:
    from parley.errors import ConfigError

    assert MaterializerSettings().checkpoint_tick_s == 0.5
    with pytest.raises(ConfigError, match="PARLEY_MATERIALIZER_CHECKPOINT_MAX_S"):
        MaterializerSettings(checkpoint_min_s=2.0, checkpoint_max_s=1.0)
    with pytest.raises(ConfigError, match="PARLEY_MATERIALIZER_LIVE_REPLIES"):
        MaterializerSettings(live_replies=0)
