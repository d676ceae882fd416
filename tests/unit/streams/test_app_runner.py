"""The one runner's agent loop (streams/app.py ``_agent_loop``) on records handed to it as faust would:
an outage is retried in place, not dead-lettered (review H1); bad input is; a dead letter's text is the
class alone when the error is not the codec's or a core's word on bad input; and an agent that fails
with records in hand exits the process instead of going on past them (review H2).

faust's stream, record, producer and topic are stood in for by the few attributes the runner reads;
tests/e2e/test_poison.py runs the same loop against the real broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaTimeoutError
from cassandra import OperationTimedOut
from faust.types import TP

from parley.errors import StoreUnavailable
from schemas import codec
from schemas.events import DeadLetter, Event, GenerationCancelRequested, TokenChunk
from streams.app import EXIT_AGENT_FAILED, TRANSIENT_HERE, _agent_loop, dead_letter
from streams.handling import kind_of
from streams.wiring import Agent

TOPIC = "chat.control"


@dataclass
class Message:
    offset: int
    key: bytes = b"conversation"
    topic: str = TOPIC
    partition: int = 0

    @property
    def tp(self) -> TP:
        return TP(self.topic, self.partition)


@dataclass
class Record:
    value: bytes | None
    message: Message
    acked: int = 0
    broken_ack: bool = False

    def ack(self) -> bool:
        if self.broken_ack:
            raise RuntimeError("a bug in the runner")
        self.acked += 1
        return True


@dataclass
class Producer:
    letters: list[tuple[str, DeadLetter]] = field(default_factory=list)

    async def send_and_wait(self, topic: str, key: bytes | None, value: bytes, *_: Any) -> None:
        letter = codec.decode(value)
        assert isinstance(letter, DeadLetter)
        self.letters.append((topic, letter))


class Consumer:
    def assignment(self) -> set[TP]:
        return {TP(TOPIC, 0)}


@dataclass
class App:
    producer: Producer = field(default_factory=Producer)
    consumer: Consumer = field(default_factory=Consumer)


@dataclass
class Sink:
    sent: list[bytes] = field(default_factory=list)

    async def send(self, *, key: bytes | None, value: bytes, partition: int | None) -> asyncio.Future[None]:
        self.sent.append(value)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class Stream:
    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records

    def noack(self) -> Stream:
        return self

    async def events(self) -> AsyncIterator[Record]:
        for record in self.records:
            yield record
        await asyncio.Event().wait()  # a stream never ends; the test cancels it


def cancel() -> GenerationCancelRequested:
    return GenerationCancelRequested(conversation_id=str(uuid.uuid4()), user_id="u", request_id=str(uuid.uuid4()), reason="user")


def chunk(event: GenerationCancelRequested) -> TokenChunk:
    return TokenChunk(conversation_id=event.conversation_id, user_id=event.user_id, request_id=event.request_id, seq=0, text="")


async def run(records: Sequence[Record], *errors: BaseException) -> tuple[App, Sink, list[Event], list[int]]:
    """The loop over ``records`` until each is acknowledged (or the loop exits); the handler raises ``errors`` first."""
    app, sink, calls, exits = App(), Sink(), [], []
    pending = list(errors)

    async def handle(event: Event) -> Sequence[Event]:
        calls.append(event)
        if pending:
            raise pending.pop(0)
        assert isinstance(event, GenerationCancelRequested)
        return [chunk(event)]

    loop = _agent_loop(
        app, "streams.test", "test", Agent(TOPIC, {GenerationCancelRequested: handle}), {"chat.tokens": sink}, 4,  # type: ignore[arg-type]
        exit_process=exits.append,
    )
    task = asyncio.ensure_future(loop(Stream(records)))  # type: ignore[arg-type]
    async with asyncio.timeout(10):  # a deadline, not a timing assertion
        while not exits and not all(r.acked for r in records):
            await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return app, sink, calls, exits


def test_the_runner_counts_the_broker_s_and_cassandra_s_timeouts_as_transient() -> None:
    assert kind_of(KafkaTimeoutError(), TRANSIENT_HERE) == "transient"  # aiokafka does not call it retriable
    assert kind_of(OperationTimedOut(), TRANSIENT_HERE) == "transient"


async def test_a_handler_s_outage_is_retried_and_its_output_sent_not_dead_lettered() -> None:
    event = cancel()
    record = Record(codec.encode(event), Message(offset=7))
    app, sink, calls, exits = await run([record], StoreUnavailable("the key service is away"))
    assert calls == [event, event] and record.acked == 1 and not exits
    [sent] = [codec.decode(v) for v in sink.sent]
    assert app.producer.letters == [] and isinstance(sent, TokenChunk) and sent.request_id == event.request_id


async def test_a_handler_s_value_error_is_dead_lettered_with_its_source() -> None:
    record = Record(codec.encode(cancel()), Message(offset=9, partition=0))
    app, sink, calls, exits = await run([record], ValueError("request_id is not a UUID"))
    [(topic, letter)] = app.producer.letters
    assert topic == "chat.control.dlq" and (letter.source_topic, letter.source_offset) == (TOPIC, 9)
    assert letter.error_type == "invalid" and letter.consumer == "streams.test"
    assert len(calls) == 1 and sink.sent == [] and record.acked == 1


async def test_a_letter_for_an_error_of_no_known_kind_carries_its_class_only() -> None:
    app, record = App(), Record(codec.encode(cancel()), Message(offset=3))
    await dead_letter(app, record, "streams.test", RuntimeError("it quoted: what the user typed"), gave_up=True)  # type: ignore[arg-type]
    [(_, letter)] = app.producer.letters
    assert (letter.error_type, letter.error) == ("handler_error", "RuntimeError")


async def test_an_agent_that_fails_with_records_in_hand_exits_rather_than_skipping_them() -> None:
    records = [Record(codec.encode(cancel()), Message(offset=n), broken_ack=n == 0) for n in range(3)]
    app, sink, calls, exits = await run(records)
    assert exits[:1] == [EXIT_AGENT_FAILED]
    assert records[0].acked == 0  # the group's next owner reads it again from the last commit
