"""Where a worker's events go: Kafka's implementation of the scheduler's ``EventSink``.

The scheduler (workers/scheduler.py) needs three ways to produce: ``send_nowait`` for token chunks
(in order, without waiting for each acknowledgement, so a slow ack never holds
up the stream), ``send`` for the final chunk (acknowledged before the request
counts as finished), and ``commit`` for the events that settle a request
(GenerationCompleted, UsageRecorded): one fenced transaction, so a worker that
lost the request's partition can never land them (workers/transactions.py).
Unit tests implement the interface in memory.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from confluent_kafka import KafkaError, Message

from parley.kafka import Delivered, EventProducer, ProduceFailed
from schemas.events import Event
from workers.transactions import TransactionalCommitter


class KafkaSink:
    def __init__(self, producer: EventProducer, committer: TransactionalCommitter) -> None:
        self._producer = producer
        self._committer = committer
        # Acknowledgements cross from the producer's poll thread in bursts: one wake-up of the event
        # loop per burst, not one per chunk (a self-pipe write each: 7 % of the worker at K = 100).
        self._acked: list[tuple[asyncio.Future[Delivered], KafkaError | None, Message]] = []
        self._acked_lock = threading.Lock()
        self._wake_pending = False

    def send_nowait(self, event: Event) -> asyncio.Future[Delivered]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Delivered] = loop.create_future()

        def done(err: KafkaError | None, msg: Message) -> None:  # on the producer's poll thread
            with self._acked_lock:
                self._acked.append((fut, err, msg))
                if self._wake_pending:
                    return
                self._wake_pending = True
            loop.call_soon_threadsafe(self._resolve_acked)

        # Called synchronously, unlike EventProducer.send inside a task: events keep the order of the calls.
        self._producer.produce(event, done)
        return fut

    def _resolve_acked(self) -> None:
        with self._acked_lock:
            acked, self._acked = self._acked, []
            self._wake_pending = False
        for fut, err, msg in acked:
            _resolve(fut, err, msg)

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
