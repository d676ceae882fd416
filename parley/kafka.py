"""Kafka producers and admin clients, with errors translated at the boundary.

Producers are idempotent with ``acks=all`` (DESIGN.md §5): a retried send never
duplicates or reorders an event within a partition. ``EventProducer`` encodes
events with the codec and routes them to their catalog topic keyed by the
catalog's key field.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from parley.transport_security import kafka_config
from schemas import catalog, codec
from schemas.events import Event


#: A request a broker has not answered by then is given up and retried (see producer_config).
SOCKET_TIMEOUT_MS = 15_000


def producer_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    config = kafka_config(settings)
    config |= {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "compression.type": "lz4",
        # Java-compatible key hashing, so every service agrees where a key lands (parley/partitioning.py).
        "partitioner": "murmur2_random",
        # Keep retrying through a broker restart (or a rolling upgrade); delivery fails only after this.
        # Idempotence keeps the retries from duplicating or reordering anything.
        "delivery.timeout.ms": 120_000,
        # A request to a broker that hangs (paused, or cut off without a reset) is given up after 15 s and
        # retried where the partition's leader is then, not after librdkafka's 60 s: with 3 replicas a new
        # leader is elected within seconds (docs/operations.md, the replicated cluster).
        "socket.timeout.ms": SOCKET_TIMEOUT_MS,
    }
    config.update(overrides)
    if "transaction.timeout.ms" in config and "socket.timeout.ms" not in overrides:
        # librdkafka refuses a transactional producer whose requests may outlive its transactions.
        config["socket.timeout.ms"] = min(SOCKET_TIMEOUT_MS, int(config["transaction.timeout.ms"]) + 100)
    return config


def admin(settings: KafkaSettings) -> AdminClient:
    return AdminClient(kafka_config(settings))


@dataclass(frozen=True)
class Delivered:
    topic: str
    partition: int
    offset: int


class ProduceFailed(BrokerUnavailable):
    """The broker did not acknowledge an event within the delivery timeout."""


class QueueFull(ProduceFailed):
    """librdkafka's local queue had no room for the event (``queue.buffering.max.*``): the broker has
    been out of reach for a while. Transient, as every ProduceFailed."""


#: How long ``send`` waits before it offers an event again to a full queue.
QUEUE_FULL_PAUSE_S = 0.05


#: A delivery report on its way to its future: (the future, librdkafka's error or None, the message).
_Ack = tuple[asyncio.Future[Delivered], KafkaError | None, Message]


class EventProducer:
    """Encodes events and produces them to their catalog topic.

    ``send`` is for asyncio code: it resolves once the broker acknowledged the
    event (all in-sync replicas); ``send_nowait`` queues the event at once and
    returns the future of that acknowledgement. ``produce_sync`` is for threads
    and CLIs. A background thread serves delivery callbacks.
    """

    def __init__(self, settings: KafkaSettings, **overrides: Any) -> None:
        self._settings = settings
        self._producer = Producer(producer_config(settings, **overrides))
        self._closed = threading.Event()
        # Acknowledgements cross from the poll thread to the event loops in bursts: one wake-up of a loop
        # per burst, not one per event (a self-pipe write each: 7 % of a worker at K = 100 streams).
        self._acked: dict[asyncio.AbstractEventLoop, list[_Ack]] = {}
        self._acked_lock = threading.Lock()
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-producer-poll", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)

    def topic_of(self, event: Event) -> str:
        return self._settings.topic(catalog.topic_name_for(event))

    def produce(
        self,
        event: Event,
        on_delivery: Callable[[KafkaError | None, Message], None],
        *,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue ``event``; ``on_delivery(err, msg)`` runs on the poll thread. For threads: while
        librdkafka's queue is full this blocks until deliveries drain it (never call it on a loop)."""
        record = self._record(event, topic)
        while not self._try_produce(record, on_delivery, partition):
            self._producer.poll(0.1)

    def _record(self, event: Event, topic: str | None) -> tuple[str, bytes, bytes | None]:
        """Encoded once, however often the queue turns it away."""
        return topic or self.topic_of(event), codec.encode(event), event.key

    def _try_produce(
        self, record: tuple[str, bytes, bytes | None], on_delivery: Callable[[KafkaError | None, Message], None], partition: int | None
    ) -> bool:
        """Hand ``record`` to librdkafka; False when its local queue is full."""
        topic, value, key = record
        kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
        try:
            self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery, **kwargs)
        except BufferError:
            return False
        return True

    def send_nowait(
        self, event: Event, *, topic: str | None = None, partition: int | None = None
    ) -> asyncio.Future[Delivered]:
        """Queue ``event`` now (events keep the order of the calls); the future resolves on its acknowledgement,
        or fails with ``ProduceFailed`` (``QueueFull`` at once when librdkafka's queue has no room)."""
        fut = self._send_record(self._record(event, topic), partition)
        if fut is None:
            # On the loop nothing may wait for queue space: a full queue means the broker has been away
            # long enough to fill it, and the event fails now, as it would at its delivery timeout.
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(QueueFull(f"the local queue for {self._settings.bootstrap} is full (broker away?)"))
        return fut

    def _on_delivery(
        self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Delivered]
    ) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, msg: Message) -> None:  # on the poll thread, or a thread in flush()
            with self._acked_lock:
                burst = self._acked.get(loop)
                if burst is not None:  # a wake-up is already on its way
                    burst.append((fut, err, msg))
                    return
                self._acked[loop] = [(fut, err, msg)]
            try:
                loop.call_soon_threadsafe(self._resolve_acked, loop)
            except RuntimeError:  # the loop is closed: nobody is left to await these
                with self._acked_lock:
                    self._acked.pop(loop, None)

        return done

    def _resolve_acked(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._acked_lock:
            acked = self._acked.pop(loop)
        for fut, err, msg in acked:
            _resolve(fut, err, msg)

    async def send(self, event: Event, *, topic: str | None = None, partition: int | None = None) -> Delivered:
        """Queue ``event``, awaiting room in librdkafka's queue while it is full (the loop runs on), and
        resolve on its acknowledgement."""
        record = self._record(event, topic)
        while True:
            fut = self._send_record(record, partition)
            if fut is not None:
                return await fut
            await asyncio.sleep(QUEUE_FULL_PAUSE_S)

    def _send_record(self, record: tuple[str, bytes, bytes | None], partition: int | None) -> asyncio.Future[Delivered] | None:
        """``record`` queued, with the future of its acknowledgement; None while the queue is full."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Delivered] = loop.create_future()
        if not self._try_produce(record, self._on_delivery(loop, fut), partition):
            return None
        return fut

    def produce_sync(
        self, event: Event, *, topic: str | None = None, partition: int | None = None, timeout: float = 125.0
    ) -> Delivered:
        result: list[Delivered | Exception] = []
        ready = threading.Event()

        def done(err: KafkaError | None, msg: Message) -> None:
            result.append(_outcome(err, msg))
            ready.set()

        self.produce(event, done, topic=topic, partition=partition)
        if not ready.wait(timeout):
            raise ProduceFailed(f"no acknowledgement from {self._settings.bootstrap} within {timeout}s")
        if isinstance(result[0], Exception):
            raise result[0]
        return result[0]

    def reachable(self, name: str, timeout: float = 2.0) -> bool:
        """Whether a broker answers a metadata request for catalog topic ``name`` now (blocks up to ``timeout``).

        librdkafka reports a lost broker but never its return, so this asks; it is one small
        request, cheap enough to repeat every few seconds from a thread.
        """
        topic = self._settings.topic(name)
        try:
            metadata = self._producer.list_topics(topic, timeout=timeout)
        except KafkaException:
            return False
        found = metadata.topics.get(topic)
        return bool(metadata.brokers) and found is not None and found.error is None

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for queued events; returns how many are still undelivered."""
        return self._producer.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        self._closed.set()
        self._poller.join(timeout=1)


def _outcome(err: KafkaError | None, msg: Message) -> Delivered | Exception:
    if err is not None:
        return ProduceFailed(f"delivery to {msg.topic()} failed: {err.str()}")
    return Delivered(msg.topic(), msg.partition(), msg.offset())


def _resolve(fut: asyncio.Future[Delivered], err: KafkaError | None, msg: Message) -> None:
    if fut.done():
        return
    outcome = _outcome(err, msg)
    if isinstance(outcome, Exception):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)


class AtomicAppender:
    """Appends a set of events all or nothing: one Kafka transaction, so a reader (every reader of
    ``chat.events`` reads committed records only, DESIGN.md §5) sees all of them or none. For an append that
    must never be seen in part and is not a consume-transform-produce step: an import. Blocking (call it from
    a thread); one transaction at a time. The transactional id is this process's alone (``transactional_id``),
    so nothing fences it but a restart under the same id, which aborts what it left open."""

    def __init__(self, settings: KafkaSettings, transactional_id: str, *, timeout_s: float = 60.0) -> None:
        self._settings = settings
        timeout_ms = int(timeout_s * 1000)
        # librdkafka refuses a transactional producer whose deliveries may outlive its transactions.
        overrides = {"transactional.id": transactional_id, "transaction.timeout.ms": timeout_ms, "delivery.timeout.ms": timeout_ms}
        self._config = producer_config(settings, **overrides)
        self._timeout_s = timeout_s
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def append(self, events: Sequence[Event]) -> None:
        """Every event of ``events`` committed, or ``ProduceFailed`` and none (a commit that timed out may
        still have landed: events with derived ids make the caller's retry harmless)."""
        with self._lock:
            producer = self._ready()
            try:
                producer.begin_transaction()
                for event in events:
                    topic, value, key = self._settings.topic(catalog.topic_name_for(event)), codec.encode(event), event.key
                    while True:
                        try:
                            producer.produce(topic, value=value, key=key)
                            break
                        except BufferError:  # librdkafka's queue is full: let deliveries drain it
                            producer.poll(0.1)
                producer.commit_transaction(self._timeout_s)
            except KafkaException as exc:
                self._abandon(producer, exc)
                raise ProduceFailed(f"the transaction to {self._settings.bootstrap} failed: {exc.args[0].str()}") from exc

    def _ready(self) -> Producer:
        if self._producer is None:
            producer = Producer(self._config)
            try:
                producer.init_transactions(self._timeout_s)
            except KafkaException as exc:
                raise ProduceFailed(f"no transactions from {self._settings.bootstrap}: {exc.args[0].str()}") from exc
            self._producer = producer
        return self._producer

    def _abandon(self, producer: Producer, exc: KafkaException) -> None:
        """Abort what was begun; a producer left unusable (a fatal error, an abort refused) is dropped, and the
        next append starts a new one, whose ``init_transactions`` aborts whatever this one left open."""
        error = exc.args[0]
        if not error.fatal():
            try:
                producer.abort_transaction(self._timeout_s)
                return
            except KafkaException:
                pass
        self._producer = None

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(5)
                self._producer = None
