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
from collections.abc import Sequence

from parley.kafka import Delivered, EventProducer
from schemas.events import Event
from workers.transactions import TransactionalCommitter


class KafkaSink:
    def __init__(self, producer: EventProducer, committer: TransactionalCommitter) -> None:
        self._producer = producer
        self._committer = committer

    def send_nowait(self, event: Event) -> asyncio.Future[Delivered]:
        return self._producer.send_nowait(event)

    async def send(self, event: Event) -> Delivered:
        return await self._producer.send(event)

    async def commit(self, events: Sequence[Event]) -> None:
        await self._committer.commit(events)
