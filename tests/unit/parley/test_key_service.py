"""The key service's cache and reads (parley/keys.py): one read in flight per user, a bounded cache,
reads ahead of expiry, and a typed, transient error when the keys cannot be read.

``data_keys`` here is a dict behind a stand-in session that counts reads and can hold them on a gate;
the same service against real Cassandra (and against a closed port) is tests/integration/test_keys.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cassandra import ConsistencyLevel, OperationTimedOut

from parley.errors import StoreUnavailable, Unavailable
from parley.keys import ERASED_MARK, KeyService, KeyUnavailable, LocalKms
from parley.kms import AwsKms, WrappedKeyRefused
from schemas import codec, sealing
from schemas.events import MessagePosted
from tests.fixtures.aws_kms import REGION, kms_server

CID = "00000000-0000-0000-0000-0000000000c1"
MID = "00000000-0000-0000-0000-0000000000a1"
#: Where the values of these tests are sealed for (schemas/sealing.py: a field or cell and its row).
AT = sealing.cell_at("messages", "content", MID)


class Rows:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def all(self) -> list[Any]:
        return list(self._rows)

    def one(self) -> Any:
        return self._rows[0] if self._rows else None


class Table:
    """``data_keys`` as {user: {version: row}}, read through the statements KeyService prepares."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, SimpleNamespace]] = {}
        self.reads = 0
        self.prepared: list[SimpleNamespace] = []
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()  # a read is held on the gate
        self.down = False

    def prepare(self, cql: str) -> SimpleNamespace:
        statement = SimpleNamespace(cql=cql, consistency_level=None, serial_consistency_level=None)
        self.prepared.append(statement)
        return statement

    def execute(self, statement: SimpleNamespace, values: tuple[Any, ...]) -> Rows:
        if self.down:
            raise OperationTimedOut("no answer")  # what the driver raises for a node that went quiet
        user = values[0]
        cql = statement.cql
        if cql.startswith("SELECT"):
            self.reads += 1
            found = sorted(self.rows.get(user, {}).values(), key=lambda r: -r.version)  # read, then held on the gate
            self.waiting.set()
            assert self.gate.wait(10), "the test never opened the gate"
            return Rows(found)
        if cql.startswith("DELETE"):
            self.rows.pop(user, None)
            return Rows([])
        if "IF NOT EXISTS" in cql:
            if 1 in self.rows.get(user, {}):
                return Rows([(False,)])
            self.rows.setdefault(user, {})[1] = SimpleNamespace(version=1, wrapped=values[1], kek_id=values[2])
            return Rows([(True,)])
        self.rows.setdefault(user, {})[0] = SimpleNamespace(version=0, wrapped=None, kek_id=values[1])  # the mark
        return Rows([])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table() -> Table:
    return Table()


@pytest.fixture
def kms(tmp_path: Path) -> LocalKms:
    return LocalKms(tmp_path / "kek.json")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def services(table: Table, kms: LocalKms, clock: Clock) -> Iterator[Any]:
    made: list[KeyService] = []

    def make(**kwargs: Any) -> KeyService:
        service = KeyService(lambda: table, kms, "ks", clock=clock, **kwargs)  # type: ignore[arg-type,return-value]
        made.append(service)
        return service

    yield make
    for service in made:
        service.close()


def _wait(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.01)


def test_many_callers_of_one_user_share_one_read(services: Any, table: Table) -> None:
    writer = services()
    value = writer.seal("u1", "the text", at=AT)
    reader = services()
    table.reads = 0
    table.gate.clear()
    table.waiting.clear()
    opened: list[str] = []
    threads = [threading.Thread(target=lambda: opened.append(reader.open(value, at=AT))) for _ in range(8)]
    for t in threads:
        t.start()

    async def prefetches() -> None:
        table.waiting.wait(10)
        waits = [asyncio.create_task(reader.prefetch(["u1"])) for _ in range(8)]
        await asyncio.sleep(0)  # every prefetch has joined the read held on the gate
        table.gate.set()
        await asyncio.gather(*waits)

    asyncio.run(prefetches())
    for t in threads:
        t.join(10)
    assert opened == ["the text"] * 8
    assert table.reads == 1


def test_the_cache_is_bounded_and_forgets_the_least_recently_used(services: Any, table: Table) -> None:
    service = services(capacity=2)
    for user in ("u1", "u2", "u3"):
        service.seal(user, "x", at=AT)
    table.reads = 0
    service.seal("u3", "x", at=AT)
    service.seal("u2", "x", at=AT)
    assert table.reads == 0  # held
    service.seal("u1", "x", at=AT)  # forgotten when u3 came in: read again
    assert table.reads == 1


def test_a_key_in_use_is_read_again_ahead_of_expiry_without_the_caller_waiting(services: Any, table: Table, clock: Clock) -> None:
    service = services(cache_s=60.0)
    value = service.seal("u1", "x", at=AT)
    table.reads = 0
    clock.now += 40  # past half the bound
    table.gate.clear()
    assert service.open(value, at=AT) == "x"  # served from the cache while the read waits on the gate
    _wait(table.waiting.is_set)
    table.gate.set()
    _wait(lambda: not service._flights)
    clock.now += 40  # 80 s after the first read, 40 after the second: still held
    assert service.open(value, at=AT) == "x"
    assert table.reads == 1


def test_an_erasure_reaches_a_process_within_its_cache_bound(services: Any, clock: Clock) -> None:
    writer, other = services(cache_s=60.0), services(cache_s=60.0)
    value = writer.seal("u1", "x", at=AT)
    assert other.open(value, at=AT) == "x"
    writer.erase("u1")
    assert writer.open(value, at=AT) == sealing.ERASED  # at once where it was erased
    clock.now += 61
    assert other.open(value, at=AT) == sealing.ERASED  # elsewhere once the bound has passed
    assert other.seal("u1", "after", at=AT) == sealing.ERASED


def test_an_erasure_wins_over_a_read_that_was_in_flight(services: Any, table: Table) -> None:
    service = services()
    value = services().seal("u1", "x", at=AT)
    table.gate.clear()
    table.waiting.clear()
    reading = threading.Thread(target=lambda: service.open(value, at=AT))
    reading.start()
    table.waiting.wait(10)
    service.erase("u1")
    table.gate.set()
    reading.join(10)
    assert service.open(value, at=AT) == sealing.ERASED


def test_key_rows_are_read_and_written_at_local_quorum(services: Any, table: Table) -> None:
    services().seal("u1", "x", at=AT)
    assert table.prepared and all(s.consistency_level == ConsistencyLevel.LOCAL_QUORUM for s in table.prepared)
    (create,) = [s for s in table.prepared if "IF NOT EXISTS" in s.cql]
    assert create.serial_consistency_level == ConsistencyLevel.LOCAL_SERIAL


def test_with_the_store_down_a_missing_key_is_a_transient_error_and_a_held_one_goes_on(
    services: Any, table: Table, clock: Clock
) -> None:
    writer = services(cache_s=60.0)
    value = writer.seal("u1", "x", at=AT)
    table.down = True
    fresh = services()
    with pytest.raises(KeyUnavailable) as raised:
        fresh.open(value, at=AT)
    assert isinstance(raised.value, StoreUnavailable) and isinstance(raised.value, Unavailable)
    assert not isinstance(raised.value, codec.CodecError)  # not bad input: nothing is dead-lettered for it
    try:
        event = MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="x", client_message_id="c")
        sealing.install(writer)
        data = codec.encode(event)
        sealing.install(fresh)
        with pytest.raises(KeyUnavailable):
            codec.decode(data)
        with pytest.raises(KeyUnavailable):
            asyncio.run(codec.decode_async(data))
        with pytest.raises(KeyUnavailable):
            asyncio.run(codec.encode_async(event))
        clock.now += 61  # the writer's key has expired, but Cassandra does not answer: it goes on working
        sealing.install(writer)
        assert codec.decode(data) == event
        assert asyncio.run(codec.decode_async(data)) == event
    finally:
        sealing.install(None)
    table.down = False
    clock.now += 3  # past RETRY_S: asked again, and answered
    assert fresh.open(value, at=AT) == "x"


def test_after_a_failed_read_the_store_is_not_asked_again_at_once(services: Any, table: Table, clock: Clock) -> None:
    """During an outage each caller fails at once rather than each waiting on the driver in turn."""
    service = services()
    table.down = True
    with pytest.raises(KeyUnavailable):
        service.seal("u1", "x", at=AT)
    calls = []
    table.execute = lambda *a: calls.append(a)  # type: ignore[method-assign,assignment]
    with pytest.raises(KeyUnavailable):
        service.seal("u1", "x", at=AT)
    assert calls == []


def test_the_mark_wins_over_a_key_made_in_a_race_with_the_erasure(services: Any, table: Table, kms: LocalKms) -> None:
    service = services()
    value = service.seal("u1", "x", at=AT)
    table.rows["u1"][0] = type(table.rows["u1"][1])(version=0, wrapped=None, kek_id=ERASED_MARK)  # both rows
    assert services().open(value, at=AT) == sealing.ERASED


def test_on_an_event_loop_an_expired_key_serves_while_it_is_read_again(services: Any, table: Table, clock: Clock) -> None:
    """A synchronous call on a loop never waits for a key it holds: it is read again in the background
    (the erasure bound grows by that one read); off a loop the caller waits for the read."""
    service = services(cache_s=60.0)
    value = service.seal("u1", "x", at=AT)
    clock.now += 61
    table.gate.clear()
    table.waiting.clear()

    async def on_loop() -> str:
        return service.open(value, at=AT)

    assert asyncio.run(on_loop()) == "x"  # served with the gate still shut
    _wait(table.waiting.is_set)
    services_erased = services()
    services_erased.erase("u1")  # the read in flight already has its rows (the key): it lands, then the next one sees the mark
    table.gate.set()
    _wait(lambda: not service._flights)
    clock.now += 61
    assert service.open(value, at=AT) == sealing.ERASED  # off a loop: waits for the read, which finds the mark


def test_the_loop_goes_on_while_a_decode_waits_for_its_key(services: Any, table: Table) -> None:
    event = MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="x", client_message_id="c")
    writer, reader = services(), services()
    sealing.install(writer)
    data = codec.encode(event)
    sealing.install(reader)
    table.gate.clear()
    table.waiting.clear()

    async def run() -> None:
        decoding = asyncio.create_task(codec.decode_async(data))
        ticks = 0
        while not table.waiting.is_set():  # the read has begun, on a fetcher thread
            await asyncio.sleep(0.01)
        for _ in range(5):
            await asyncio.sleep(0)
            ticks += 1  # the loop runs other work while the key is read
        assert ticks == 5 and not decoding.done()
        table.gate.set()
        assert await decoding == event

    try:
        asyncio.run(run())
    finally:
        sealing.install(None)


def test_a_kms_outage_is_transient_and_a_refusal_is_never_taken_for_an_erasure(table: Table, clock: Clock) -> None:
    """Over AWS KMS (moto's server): a key the KMS will not unwrap raises, it never reads as ``[erased]``
    (which ``seal`` would write in place of the text); a KMS that stops answering is a ``KeyUnavailable``,
    and a key a process holds goes on working, as during a Cassandra outage."""
    made: list[KeyService] = []

    def service(kms: AwsKms) -> KeyService:
        made.append(KeyService(lambda: table, kms, "ks", clock=clock))  # type: ignore[arg-type,return-value]
        return made[-1]

    try:
        with kms_server() as aws:
            kms = AwsKms(aws.create_key(), region=REGION, endpoint_url=aws.endpoint_url)
            holder = service(kms)
            value = holder.seal("u1", "the text", at=AT)
            copied = table.rows["u1"][1]
            table.rows["u2"] = {1: SimpleNamespace(version=1, wrapped=copied.wrapped, kek_id=copied.kek_id)}  # u1's key as u2's
            with pytest.raises(WrappedKeyRefused):
                service(kms).seal("u2", "text", at=AT)
        with pytest.raises(KeyUnavailable):  # the KMS is gone
            service(kms).open(value, at=AT)
        clock.now += 61
        assert holder.open(value, at=AT) == "the text"
    finally:
        for s in made:
            s.close()
