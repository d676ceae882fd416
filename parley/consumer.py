"""The shared consumer: decode events, dead-letter poison, commit what is done.

Every processor that reads Kafka through confluent-kafka uses ``EventConsumer``:

* a record that does not decode (or breaks its event's rules, or is larger than
  ``max_event_bytes``) is produced to ``<topic>.dlq`` as a ``DeadLetter``, and
  only once the broker acknowledged that is its offset marked done; the
  partition carries on. Nothing is dropped silently and nothing crash-loops.
* a good record whose data key cannot be read now (``KeyUnavailable``:
  Cassandra is away) is neither dead-lettered nor raised: its partition is
  read again from it at the next poll.
* offsets are committed only for records the caller marked done (``done``),
  so a crash redelivers whatever was in flight (at-least-once; consumers are
  idempotent by event ids).

faust agents use ``dead_letter_for`` for the same DLQ record shape.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from parley.errors import BrokerUnavailable, Unavailable
from parley.metrics import DEAD_LETTERS
from parley.kafka import EventProducer
from parley.settings import KafkaSettings
from parley.transport_security import kafka_config
from schemas import codec
from schemas.catalog import dlq_name
from schemas.events import DeadLetter, Event

log = logging.getLogger(__name__)

E = TypeVar("E", bound=Event)

#: Pause after a poll that met a record whose data key could not be read (parley/keys.py KeyUnavailable).
AGAIN_S = 0.5

#: Larger records are dead-lettered unread: no legitimate event comes near it
#: (the gateway caps message text far lower), and the broker refuses 1 MiB.
DEFAULT_MAX_EVENT_BYTES = 512 * 1024


def poll_batch(consumer: Consumer, max_records: int, timeout: float) -> list[Message]:
    """Up to ``max_records`` records, returning as soon as one has arrived.

    ``Consumer.consume(n, timeout)`` waits out the whole timeout unless n records
    arrive, which adds up to ``timeout`` of latency to live traffic; this blocks
    only for the first record and then takes what is already fetched.
    """
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]


def reached(consumer: Consumer, ends: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    """The (topic, partition)s of ``ends`` whose reading got to their end offset.

    Asked of the position, not of the last record delivered: the workers' transactions leave
    commit markers on chat.events and chat.usage, which take an offset and are never handed to
    the application, so "the record at end − 1 arrived" may never happen. A partition has a
    position only once something of it was fetched: leave out the empty ones.
    """
    if not ends:
        return []
    try:
        positions = consumer.position([TopicPartition(t, p) for t, p in ends])
    except KafkaException as exc:
        raise BrokerUnavailable(f"position unknown: {exc}") from exc
    return [(tp.topic, tp.partition) for tp in positions if tp.offset >= ends[(tp.topic, tp.partition)]]


#: Broker answers that mean "ask again shortly": a leader moving, or metadata not yet current after a
#: topic was made or a broker came back. librdkafka does not flag these retriable on watermark queries.
#: Broker answers that pass: a leader moving, a topic just created, a slow broker. Asked again, not raised.
TRANSIENT = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
})


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float, cached: bool = False) -> tuple[int, int]:
    """The low and high offsets of ``tp`` from the broker, asked again while it answers with a
    transient error, until ``timeout_s``; the last error is raised after that."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=max(0.1, deadline - time.monotonic()), cached=cached
            )
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in TRANSIENT or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def read_until(consumer: Consumer, ends: dict[tuple[str, int], int], timeout_s: float) -> Iterator[Message]:
    """The records of the assigned partitions below their end offsets, until every partition's
    position got to its end (``reached``); BrokerUnavailable after ``timeout_s``. The caller
    assigns the partitions, at offsets below their ends, and leaves out empty ones."""
    left = dict(ends)
    deadline = time.monotonic() + timeout_s
    while left:
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"reading {sorted(left)} to their ends took over {timeout_s:.0f} s")
        for msg in poll_batch(consumer, 500, 0.5):
            if msg.error() or msg.value() is None:
                continue
            if msg.offset() < ends.get((msg.topic(), msg.partition()), -1):
                yield msg
        for where in reached(consumer, left):
            del left[where]


def reader(kafka: KafkaSettings, purpose: str, **overrides: Any) -> Consumer:
    """A consumer outside any group (``assign`` only, nothing committed) reading committed records only:
    what every group-less reader starts from (the gateway's token streams, heartbeats, memory, cancels,
    recovery lookups, the router's recall, the audit, the analysts). ``overrides``: librdkafka
    settings with dots as underscores (``auto_offset_reset="latest"``)."""
    config = kafka_config(kafka)
    config |= {
        # librdkafka insists on a group id; assign() never joins it and nothing is committed to it.
        "group.id": f"parley-{purpose}-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "isolation.level": "read_committed",
    }
    config.update({key.replace("_", "."): value for key, value in overrides.items()})
    return Consumer(config)


def records_since(consumer: Consumer, starts: list[TopicPartition], timeout_s: float) -> Iterator[Message]:
    """The records of ``starts`` (each one's ``offset`` a timestamp, ms) from the first at or after that
    time to the partition's end offset when asked; BrokerUnavailable after ``timeout_s``."""
    try:
        found = consumer.offsets_for_times(starts, timeout=timeout_s)
        ends: dict[tuple[str, int], int] = {}
        assign = []
        for tp in found:
            if tp.offset < 0:  # nothing that recent
                continue
            _, high = watermarks(consumer, tp, timeout_s)
            if tp.offset < high:
                ends[(tp.topic, tp.partition)] = high
                assign.append(TopicPartition(tp.topic, tp.partition, tp.offset))
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot find where to read from: {exc}") from exc
    if assign:
        consumer.assign(assign)
        yield from read_until(consumer, ends, timeout_s)


def read_events(consumer: Consumer, kind: type[E], max_records: int, timeout: float, what: str) -> tuple[list[E], int]:
    """For readers outside any group that every instance runs (heartbeats, memory, cancels): the
    decoded events of ``kind`` in a batch, and how many records were skipped as undecodable. Every
    instance reads the same records, so a bad one is logged and skipped, not dead-lettered N times. A good
    one whose data key cannot be read now is read again at the next call (``read_again``), not lost."""
    try:
        messages = poll_batch(consumer, max_records, timeout)
    except KafkaException as exc:
        raise BrokerUnavailable(f"consume ({what}) failed (PARLEY_KAFKA_BOOTSTRAP): {exc}") from exc
    out: list[E] = []
    skipped = 0
    behind: set[tuple[str, int]] = set()
    for msg in messages:
        if msg.error() or msg.value() is None:  # a tombstone, or a transient error librdkafka retries
            continue
        if (msg.topic(), msg.partition()) in behind:
            continue
        try:
            if len(msg.value()) > DEFAULT_MAX_EVENT_BYTES:  # as EventConsumer: never read, whatever it holds
                raise EventTooLarge(f"record of {len(msg.value())} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
            event = codec.decode(msg.value())
        except Unavailable as exc:  # its data key did not answer: read it again next time, lose nothing
            behind.add((msg.topic(), msg.partition()))
            read_again(consumer, msg, exc, what)
            continue
        except codec.CodecError as exc:
            skipped += 1
            log.warning(
                f"undecodable {what} record skipped",
                extra={"partition": msg.partition(), "offset": msg.offset(), "error": type(exc).__name__},
            )
            continue
        if isinstance(event, kind):
            out.append(event)
    if behind:
        time.sleep(AGAIN_S)  # no hot loop while Cassandra is away
    return out, skipped


def read_again(consumer: Consumer, msg: Message, error: Exception, reader: str) -> None:
    """Have ``consumer`` read ``msg``'s partition again from ``msg`` (a good record whose data key could
    not be read: parley/keys.py ``KeyUnavailable``); the caller skips the partition's later records of
    this batch."""
    log.warning(
        "record not readable yet; read again",
        extra={"reader": reader, "partition": msg.partition(), "offset": msg.offset(), "error": type(error).__name__},
    )
    try:
        consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
    except KafkaException:
        pass  # revoked meanwhile: its new owner reads it


class EventTooLarge(codec.CodecError):
    pass


@dataclass(frozen=True)
class Delivery:
    """One decoded event and where it came from."""

    event: Event
    topic: str
    partition: int
    offset: int
    key: bytes | None


def dead_letter_for(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: Exception,
    consumer: str,
) -> DeadLetter:
    """The DLQ record for a bad input. A record that names its owner (``codec.owner``) gets only the
    error's class in the clear and its words in ``detail``, sealed under the owner's key (they may quote
    the record: an erasure shreds them); one that does not parse that far gets the codec's words about
    its bytes, which never quote the payload."""
    error_type = {
        codec.NotSingleObject: "undecodable",
        codec.Undecodable: "undecodable",
        codec.UnknownSchema: "unknown_schema",
        codec.InvalidEvent: "invalid",
        EventTooLarge: "oversize",
    }.get(type(error), "invalid")
    owner = codec.owner(value)
    return DeadLetter(
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        consumer=consumer,
        error_type=error_type,
        error=type(error).__name__ if owner else str(error)[:1000],
        raw_key=key,
        raw_value=value,
        user_id=owner,
        detail=str(error)[:1000] if owner else "",
    )


class EventConsumer:
    """A consumer-group member that yields decoded events and dead-letters the rest."""

    def __init__(
        self,
        settings: KafkaSettings,
        group: str,
        topics: Iterable[str],
        producer: EventProducer,
        *,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        on_assign: Callable[[Consumer, list[TopicPartition]], None] | None = None,
        **overrides: Any,
    ) -> None:
        config = kafka_config(settings)
        config |= {
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,  # only what `done` stores is committed
            "auto.commit.interval.ms": 1000,
            "partition.assignment.strategy": "cooperative-sticky",
        }
        config.update(overrides)
        self.group = group
        self._settings = settings
        self._producer = producer
        self._max_bytes = max_event_bytes
        self._consumer = Consumer(config)
        self._consumer.subscribe([settings.topic(t) for t in topics], **({"on_assign": on_assign} if on_assign else {}))
        self.dead_lettered = 0

    def poll(self, timeout: float = 1.0, max_records: int = 100) -> list[Delivery]:
        """Decoded events; poison records are dead-lettered (and marked done) on the way."""
        try:
            messages = poll_batch(self._consumer, max_records, timeout)
        except KafkaException as exc:
            raise BrokerUnavailable(f"consume failed: {exc}") from exc
        out = []
        behind: set[tuple[str, int]] = set()  # partitions read again from a record whose data key did not answer
        for msg in messages:
            if msg.error():
                log.warning("consumer error", extra={"group": self.group, "error": msg.error().str()})
                continue
            if (msg.topic(), msg.partition()) in behind:
                continue
            try:
                try:
                    out.append(self._decode(msg))
                except codec.CodecError as exc:
                    self._dead_letter(msg, exc)  # seals the letter's detail: its owner's key may not answer either
            except Unavailable as exc:  # KeyUnavailable: a good record, its key unread while Cassandra is away
                behind.add((msg.topic(), msg.partition()))
                read_again(self._consumer, msg, exc, self.group)
        if behind:
            time.sleep(AGAIN_S)  # no hot loop while Cassandra is away
        return out

    def _decode(self, msg: Message) -> Delivery:
        value = msg.value()
        if value is not None and len(value) > self._max_bytes:
            raise EventTooLarge(f"record of {len(value)} bytes exceeds {self._max_bytes}")
        event = codec.decode(value)
        return Delivery(event, msg.topic(), msg.partition(), msg.offset(), msg.key())

    def _dead_letter(self, msg: Message, error: Exception) -> None:
        letter = dead_letter_for(
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            key=msg.key(),
            value=msg.value(),
            error=error,
            consumer=self.group,
        )
        # Wait for the DLQ ack before moving past the record: nothing is lost.
        self._producer.produce_sync(letter, topic=dlq_name(msg.topic()))
        self.dead_lettered += 1
        DEAD_LETTERS.labels(msg.topic(), self.group).inc()
        log.warning(
            "dead-lettered a record",
            extra={
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "error_type": letter.error_type,
            },
        )
        self.store(msg.topic(), msg.partition(), msg.offset())

    def done(self, delivery: Delivery) -> None:
        """Mark ``delivery`` handled: its offset may be committed."""
        self.store(delivery.topic, delivery.partition, delivery.offset)

    def store(self, topic: str, partition: int, offset: int) -> None:
        """Everything up to and including ``offset`` of that partition is handled."""
        self._consumer.store_offsets(offsets=[TopicPartition(topic, partition, offset + 1)])

    def commit(self) -> None:
        """Commit stored offsets now (also happens every second on its own)."""
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing stored yet
                raise

    def assignment(self) -> list[TopicPartition]:
        return self._consumer.assignment()

    def hold(self) -> None:
        """Pause every assigned partition: for a record whose handling outlasts ``max.poll.interval.ms``
        (a document job), during which ``keep_alive`` keeps the member in its group."""
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.pause(assigned)

    def keep_alive(self) -> None:
        """Poll while held: nothing of a paused partition comes back, and the group sees a live member. A
        record of a partition assigned since ``hold`` is put back (seek) and its partition paused too."""
        msg = self._consumer.poll(0)
        if msg is not None and not msg.error():
            where = TopicPartition(msg.topic(), msg.partition(), msg.offset())
            self._consumer.seek(where)
            self._consumer.pause([TopicPartition(msg.topic(), msg.partition())])

    def release(self) -> None:
        """Resume every assigned partition after ``hold``."""
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.resume(assigned)

    def close(self) -> None:
        """Commit what is done and leave the group (hands partitions over at once)."""
        try:
            self.commit()
        finally:
            self._consumer.close()
