"""Poison or transient (streams/handling.py): bad input is dead-lettered at once; an outage is retried
in place, never skipped, and a key's next record waits behind it; an error of no known kind is retried
for a while and then dead-lettered. The pauses are recorded, not slept."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, MessageSizeTooLargeError

from parley.errors import BadInput, BrokerUnavailable, StoreUnavailable
from parley.metrics import PROCESSOR_GAVE_UP, PROCESSOR_RETRIES
from schemas import codec
from schemas.events import Event, GenerationCancelRequested, TokenChunk
from streams.handling import UNKNOWN_GIVE_UP_S, RecordHandler, Rejected, Retry, kind_of
from streams.lanes import Lanes
from streams.wiring import Agent


def cancel(n: int = 0) -> GenerationCancelRequested:
    return GenerationCancelRequested(
        conversation_id=str(uuid.uuid4()), user_id=f"u{n}", request_id=str(uuid.uuid4()), reason="user"
    )


@dataclass
class Record:
    value: bytes | None
    acked: int = 0

    def ack(self) -> bool:
        self.acked += 1
        return True


@dataclass
class Shell:
    """What the runner hands a RecordHandler: the sends and dead letters it made, the pauses it slept."""

    pauses: list[float] = field(default_factory=list)
    sent: list[Event] = field(default_factory=list)
    dead: list[tuple[Record, Rejected]] = field(default_factory=list)
    send_failures: list[BaseException] = field(default_factory=list)  # raised by the next sends, in turn
    dead_letter_failures: list[BaseException] = field(default_factory=list)
    owned: bool = True

    async def sleep(self, s: float) -> None:
        self.pauses.append(s)
        await asyncio.sleep(0)  # let the other lanes run, as a real pause would

    async def send(self, event: Event) -> None:
        if self.send_failures:
            raise self.send_failures.pop(0)
        self.sent.append(event)

    async def dead_letter(self, record: Record, rejected: Rejected) -> None:
        if self.dead_letter_failures:
            raise self.dead_letter_failures.pop(0)
        self.dead.append((record, rejected))

    def handler(self, agent: Agent, processor: str = "test") -> RecordHandler:
        return RecordHandler(
            agent,
            Retry(processor, sleep=self.sleep),
            decode=lambda r: codec.decode(r.value),  # type: ignore[attr-defined]
            send=self.send,
            dead_letter=self.dead_letter,  # type: ignore[arg-type]
            owns=lambda r: self.owned,
        )


class Failing:
    """A handler that raises each of ``errors`` in turn, then answers with one TokenChunk."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls: list[Event] = []

    async def __call__(self, event: Event) -> Sequence[Event]:
        self.calls.append(event)
        if self.errors:
            raise self.errors.pop(0)
        assert isinstance(event, GenerationCancelRequested)
        return [TokenChunk(conversation_id=event.conversation_id, user_id=event.user_id, request_id=event.request_id, seq=0, text="")]


def agent(handler: Failing) -> Agent:
    return Agent("chat.control", {GenerationCancelRequested: handler})


def count(metric: object, *labels: str) -> float:
    return metric.labels(*labels)._value.get()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (codec.UnknownSchema("fingerprint"), "bad_input"),
        (codec.InvalidEvent("field"), "bad_input"),
        (ValueError("not a UUID"), "bad_input"),
        (BadInput("no row can hold it"), "bad_input"),
        (StoreUnavailable("cassandra"), "transient"),
        (BrokerUnavailable("kafka"), "transient"),
        (TimeoutError(), "transient"),
        (ConnectionResetError(), "transient"),
        (KafkaConnectionError(), "transient"),  # aiokafka says it is retriable
        (MessageSizeTooLargeError(), "unknown"),  # aiokafka says it is not
        (KeyError("a bug"), "unknown"),
        (RuntimeError("a bug"), "unknown"),
    ],
)
def test_each_error_is_of_one_kind(error: BaseException, kind: str) -> None:
    assert kind_of(error) == kind


async def test_a_transient_error_is_retried_in_place_and_the_record_then_handled_once() -> None:
    shell, handler = Shell(), Failing(StoreUnavailable("cassandra away"), BrokerUnavailable("broker away"))
    record = Record(codec.encode(cancel()))
    before = count(PROCESSOR_RETRIES, "transient-test", "StoreUnavailable")
    await shell.handler(agent(handler), "transient-test")(record)
    assert len(handler.calls) == 3 and len(shell.sent) == 1 and record.acked == 1
    assert shell.dead == [] and shell.pauses == [0.2, 0.4]  # backing off, not dead-lettered
    assert count(PROCESSOR_RETRIES, "transient-test", "StoreUnavailable") == before + 1


async def test_bad_input_is_dead_lettered_at_once() -> None:
    shell, handler = Shell(), Failing(ValueError("conversation_id is not a UUID"))
    record = Record(codec.encode(cancel()))
    await shell.handler(agent(handler))(record)
    assert len(handler.calls) == 1 and shell.pauses == [] and shell.sent == []
    [(letter, rejected)] = shell.dead
    assert letter is record and isinstance(rejected.error, ValueError) and not rejected.gave_up
    assert record.acked == 1  # the partition carries on past it


async def test_an_undecodable_record_and_an_event_with_no_handler_are_dead_lettered_at_once() -> None:
    shell = Shell()
    undecodable, unexpected = Record(b"\x00not avro"), Record(codec.encode(TokenChunk(conversation_id=str(uuid.uuid4()), user_id="u", request_id=str(uuid.uuid4()), seq=0, text="")))
    handle = shell.handler(agent(Failing()))
    await handle(undecodable)
    await handle(unexpected)
    assert [type(r.error) for _, r in shell.dead] == [codec.NotSingleObject, BadInput]
    assert shell.pauses == [] and undecodable.acked == unexpected.acked == 1


async def test_an_error_of_no_known_kind_is_retried_for_a_while_then_dead_lettered() -> None:
    shell, handler = Shell(), Failing(*(RuntimeError("a bug") for _ in range(100)))
    record = Record(codec.encode(cancel()))
    before = count(PROCESSOR_GAVE_UP, "unknown-test", "RuntimeError")
    await shell.handler(agent(handler), "unknown-test")(record)
    assert sum(shell.pauses[:-1]) < UNKNOWN_GIVE_UP_S <= sum(shell.pauses)  # gave up once the pauses reached the bound
    assert max(shell.pauses) == 10.0 and len(handler.calls) == len(shell.pauses) + 1
    [(_, rejected)] = shell.dead
    assert rejected.gave_up and isinstance(rejected.error, RuntimeError)
    assert record.acked == 1 and count(PROCESSOR_GAVE_UP, "unknown-test", "RuntimeError") == before + 1


async def test_a_failed_send_is_retried_alone_without_running_the_handler_again() -> None:
    shell, handler = Shell(send_failures=[KafkaConnectionError(), OSError("connection reset")]), Failing()
    record = Record(codec.encode(cancel()))
    await shell.handler(agent(handler))(record)
    assert len(handler.calls) == 1 and len(shell.sent) == 1 and shell.pauses == [0.2, 0.4] and record.acked == 1


async def test_a_dead_letter_is_retried_whatever_the_error_and_never_skipped() -> None:
    shell = Shell(dead_letter_failures=[RuntimeError("broker said no"), KafkaTimeoutError()])
    record = Record(b"\x00not avro")
    await shell.handler(agent(Failing()))(record)
    assert len(shell.dead) == 1 and shell.pauses == [0.2, 0.4] and record.acked == 1


async def test_a_record_whose_partition_went_elsewhere_is_left_unacknowledged() -> None:
    shell, handler = Shell(owned=False), Failing(StoreUnavailable("cassandra away"))
    record = Record(codec.encode(cancel()))
    await shell.handler(agent(handler))(record)
    assert record.acked == 0 and shell.dead == [] and shell.sent == []  # its next owner reads it again


async def test_the_record_after_a_retried_one_is_not_handled_before_it() -> None:
    shell, handled = Shell(), []
    first, second = cancel(1), cancel(2)
    failures = [StoreUnavailable("cassandra away")] * 3

    async def handle(event: Event) -> Sequence[Event]:
        if event == first and failures:
            raise failures.pop()
        handled.append(event)
        return []

    records = [Record(codec.encode(first)), Record(codec.encode(second))]
    lanes: Lanes[Record] = Lanes(4, 4, shell.handler(Agent("chat.control", {GenerationCancelRequested: handle})))
    for record in records:
        await lanes.put(b"one conversation", record)  # one key: one lane, in order
    async with asyncio.timeout(5):  # a deadline, not a timing assertion
        while not all(r.acked for r in records):
            await asyncio.sleep(0.01)
    await lanes.close()
    assert handled == [first, second] and len(shell.pauses) == 3 and shell.dead == []
