"""Where a worker's events go: an interface, and the Kafka implementation.

The scheduler needs three ways to produce: ``send_nowait`` for token chunks
(in order, without waiting for each acknowledgement, so a slow ack never holds
up the stream), ``send`` for the final chunk (acknowledged before the request
counts as finished), and ``commit`` for the events that settle a request
(GenerationCompleted, UsageRecorded): one fenced transaction, so a worker that
lost the request's partition can never land them (workers/transactions.py).
Unit tests implement this interface in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message

from parley.kafka import Delivered, EventProducer, ProduceFailed
from schemas.events import Event
from workers.transactions import TransactionalCommitter


class EventSink(Protocol):
    def send_nowait(self, event: Event) -> asyncio.Future[Any]:
        """Queue ``event`` now (so queue order is produce order); the future resolves on its ack."""
        ...

    async def send(self, event: Event) -> Any:
        """Produce ``event`` and wait for its ack; raises ``parley.errors.BrokerUnavailable`` when none comes."""
        ...

    async def commit(self, events: Sequence[Event]) -> None:
        """Write ``events`` all or none, only while this worker still owns their request's partition;
        returns once they are committed. Raises ``workers.transactions.Fenced`` if this process was
        replaced by another with its id."""
        ...


class KafkaSink:
    def __init__(self, producer: EventProducer, committer: TransactionalCommitter) -> None:
        self._producer = producer
        self._committer = committer

    def send_nowait(self, event: Event) -> asyncio.Future[Delivered]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Delivered] = loop.create_future()

        def done(err: KafkaError | None, msg: Message) -> None:
            loop.call_soon_threadsafe(_resolve, fut, err, msg)

        # Called synchronously, unlike EventProducer.send inside a task: events keep the order of the calls.
        self._producer.produce(event, done)
        return fut

    async def send(self, event: Event) -> Delivered:
        return await self.send_nowait(event)

    async def commit(self, events: Sequence[Event]) -> None:
        await self._committer.commit(events)


def _resolve(fut: asyncio.Future[Delivered], err: KafkaError | None, msg: Message) -> None:
    if fut.done():
        return
    if err is not None:
        fut.set_exception(ProduceFailed(f"delivery to {msg.topic()} failed: {err.str()}"))
    else:
        fut.set_result(Delivered(msg.topic(), msg.partition(), msg.offset()))
