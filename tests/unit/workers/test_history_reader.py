"""The lookup of a redelivered request's history, without Kafka (workers/history_reader.py): read to every
end before any verdict, however many rounds that takes, and only the request's own records decoded.

``LogReader`` stands in for ``HistoryReader``'s Kafka round: partitions are lists of encoded records, and
a round takes at most ``max_records`` of each, the bound a busy partition meets. ``Lookup``, the filter
and ``Recovery`` are the real ones; tests/integration/test_worker_recovery.py drives the real reader.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace

import pytest

from parley.errors import BrokerUnavailable
from schemas import codec, sealing
from schemas.endings import HISTORY_UNAVAILABLE
from schemas.events import Event, GenerationCompleted, InferenceRouted, TokenChunk, UsageRecorded
from tests.unit.workers.test_recovery import chunks, completion, final, routed
from workers.history_reader import Lookup, Recovery, Where
from workers.recovery import Finished, Resume


class LogReader:
    """Rounds over records in memory, ``max_records`` of a partition each; ``failing``: rounds that raise first."""

    def __init__(self, partitions: dict[Where, list[Event]], *, max_records: int, failing: int = 0) -> None:
        self.partitions = {where: [codec.encode(e) for e in events] for where, events in partitions.items()}
        self.max_records = max_records
        self.failing = failing
        self.rounds = 0

    def lookup(self, r: InferenceRouted) -> Lookup:
        return Lookup(r.request.request_id, [])

    def read(self, lookup: Lookup) -> bool:
        self.rounds += 1
        if self.failing:
            self.failing -= 1
            raise BrokerUnavailable("broker away")
        if lookup.next is None:
            lookup.begin({w: 0 for w in self.partitions}, {w: len(v) for w, v in self.partitions.items()})
        moved = False
        for where, offset in list(lookup.next.items()):  # type: ignore[union-attr]
            for at in range(offset, min(offset + self.max_records, len(self.partitions[where]))):
                lookup.take(where, at, self.partitions[where][at])
                moved = True
        return moved


class Stuck(LogReader):
    """A partition that never answers: every round reads nothing."""

    def read(self, lookup: Lookup) -> bool:
        self.rounds += 1
        if lookup.next is None:
            lookup.begin({("t", 0): 0}, {("t", 0): 1})
        return False


def others(n: int) -> list[Event]:
    """``n`` chunks of other replies in the same conversation: what makes a partition busy."""
    return [c for _ in range(n) for c in chunks(routed(), ["x"])]


async def test_a_completion_past_the_record_bound_is_found_by_reading_on() -> None:
    """Review C1: the first round stops at its bound with only the reply's first chunks in view. The old
    lookup called that history incomplete and resumed it: the finished reply generated a second time."""
    r = routed()
    tokens = chunks(r, ["ab", "cd"]) + others(30) + [final(r, seq=2, offset=4)]
    reader = LogReader(
        {
            ("chat.tokens", 0): tokens,
            ("chat.events", 0): others(25) + [completion(r, "abcd")],
            ("chat.usage", 0): [UsageRecorded(conversation_id=r.conversation_id, user_id="u", request_id=r.request.request_id)],
        },
        max_records=10,
    )
    found = await Recovery(reader)(r)  # type: ignore[arg-type]
    assert found == Finished()  # every closing event is on the log: nothing to produce, nothing to generate
    assert reader.rounds == 4


async def test_a_partial_reply_resumes_only_once_every_partition_is_read() -> None:
    r = routed()
    reader = LogReader({("chat.tokens", 0): chunks(r, ["ab"]) + others(7) + chunks(r, ["cd"], first_seq=1, start=2)}, max_records=3)
    found = await Recovery(reader)(r)  # type: ignore[arg-type]
    assert found == Resume(attempt=1, text="abcd", tokens=2)


async def test_a_round_the_broker_fails_is_tried_again_from_where_the_lookup_stood() -> None:
    r = routed()
    reader = LogReader({("chat.events", 0): others(5) + [completion(r, "abcd")]}, max_records=2, failing=2)
    lookup = reader.lookup(r)
    reader.lookup = lambda _: lookup  # type: ignore[method-assign]
    found = await Recovery(reader, first_pause_s=0.0)(r)  # type: ignore[arg-type]
    assert isinstance(found, Finished) and {type(e) for e in found.missing} == {TokenChunk, UsageRecorded}
    assert [type(e) for e in lookup.found] == [GenerationCompleted]  # nothing taken twice


async def test_a_lookup_that_cannot_read_on_ends_the_turn_history_unavailable() -> None:
    r = routed()
    found = await Recovery(Stuck({}, max_records=1), give_up_s=0.0, first_pause_s=0.0)(r)  # type: ignore[arg-type]
    assert isinstance(found, Finished)
    completed, last = found.missing
    assert isinstance(completed, GenerationCompleted) and completed.error_code == HISTORY_UNAVAILABLE
    assert isinstance(last, TokenChunk) and last.finish_reason == "failed"


class Recording:
    """A stand-in key service (reversible, no cryptography) that remembers whose values it opened."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def seal(self, user_id: str, text: str, *, at: str, deterministic: bool = False) -> str:
        return f"{sealing.PREFIX}{user_id}:1:" + base64.b64encode(text.encode()).decode()

    def open(self, value: str, *, at: str) -> str:
        self.opened.append(sealing.owner_of(value))
        return base64.b64decode(value.rsplit(":", 1)[1]).decode()


@pytest.fixture
def keys() -> Iterator[Recording]:
    service = Recording()
    sealing.install(service)  # type: ignore[arg-type]
    yield service
    sealing.install(None)


def test_only_the_request_s_own_records_are_opened(keys: Recording) -> None:
    """Other replies of the conversation, and other users' usage on the user's partition, are sorted out
    by type and request id before anything of them is decrypted."""
    r = routed()
    stranger = routed()
    theirs = [replace(e, user_id="someone-else") for e in [*chunks(stranger, ["secret", "text"]), completion(stranger, "secret")]]
    mine = [*chunks(r, ["ab"]), completion(r, "ab")]
    lookup = Lookup(r.request.request_id, [])
    records = [codec.encode(e) for e in [theirs[0], mine[0], theirs[1], theirs[2], mine[1]]]
    lookup.begin({("t", 0): 0}, {("t", 0): len(records)})
    for at, value in enumerate(records):
        lookup.take(("t", 0), at, value)
    assert lookup.done and lookup.found == mine
    assert keys.opened and set(keys.opened) == {"u"}
