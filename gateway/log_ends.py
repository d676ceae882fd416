"""End offsets of ``chat.tokens`` partitions, asked for every waiting caller in one request.

Each new reply notes where its partition ends before its request is appended
(gateway/tokens.py: its chunks come at or after that offset). One watermark
query per reply, one at a time on one client, made a hundred replies posted
together wait for a hundred broker round trips in a row: at K = 100 it was the
largest part of the gateway's time before the append (bench/load.py).

So callers queue: one round of queries asks for every partition that someone
is waiting on, once each, and callers who arrive while a round is in flight
wait for the next one. Its cost is shared by everyone it answers: a round is
at most one query per partition, whatever the concurrency. (The queries are
a consumer's ``get_watermark_offsets``: AdminClient ``list_offsets`` answered
nothing after a broker restart in tests/e2e/test_outages.py.)
(An end read earlier would be correct too, only lower: nothing of a reply is on
the log before its request is appended; the rule "read after the call" is
kept because it is the one gateway/tokens.py states.)
"""

from __future__ import annotations

import asyncio
import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition

from parley.consumer import watermarks
from parley.errors import BrokerUnavailable

log = logging.getLogger(__name__)


class LogEnds:
    def __init__(self, consumer: Consumer, topic: str, timeout_s: float = 5.0) -> None:
        self._consumer = consumer  # used on one thread at a time: rounds do not overlap
        self._topic = topic
        self._timeout_s = timeout_s
        self._waiting: dict[int, list[asyncio.Future[int]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def end_of(self, partition: int) -> int:
        """The partition's end offset, read after this call began."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(partition, []).append(fut)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._serve(), name="chat.tokens ends")
        return await fut

    async def _serve(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            try:
                ends = await asyncio.to_thread(self._list, sorted(batch))
            except Exception as exc:  # every caller of this batch learns it; later callers try again
                failure = BrokerUnavailable(f"cannot read the end of {self._topic}: {exc}")
                for futures in batch.values():
                    for fut in futures:
                        if not fut.done():
                            fut.set_exception(failure)
                continue
            for partition, futures in batch.items():
                for fut in futures:
                    if not fut.done():
                        fut.set_result(ends[partition])

    def _list(self, partitions: list[int]) -> dict[int, int]:
        try:
            return {
                p: watermarks(self._consumer, TopicPartition(self._topic, p), self._timeout_s)[1]
                for p in partitions
            }
        except KafkaException as exc:
            raise BrokerUnavailable(str(exc)) from exc
