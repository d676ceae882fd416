"""The faust-streaming shell every processor shares: the one runner of a ``streams.wiring.Wiring``.

``wired_app`` turns any processor's wiring into a faust App (an agent per topic
it reads, dispatching by event type; produce with ack; dead-letter), so a
processor itself never imports faust. ``make_app`` builds a faust App from Parley's settings (faust speaks to Kafka
through aiokafka; both work against Kafka 4.x, proven by
``tests/integration/test_faust.py``), reading only committed records. Topics are raw bytes to faust: Parley's
codec decodes them, and ``decoded_records`` dead-letters what it cannot decode, so an
agent only ever sees current event types and a poison record never stops a
partition.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.auth import CredentialsT

from parley.consumer import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, dead_letter_for
from parley.logs import TRACE_ID
from parley.metrics import DEAD_LETTERS, Readiness
from parley.settings import KafkaSettings
from parley.transport_security import kafka_tls
from schemas import codec
from schemas.catalog import dlq_name, topic_name_for
from schemas.events import Event, InferenceRouted
from streams.lanes import Lanes
from streams.settings import StreamsSettings
from streams.wiring import Agent, RebalanceHook, Wiring

log = logging.getLogger(__name__)

#: Events queued per lane before the agent stops reading (streams/lanes.py).
LANE_DEPTH = 64
#: What a fetch waits to fill when the processor's wiring lets it wait (Wiring.fetch_wait_ms).
FETCH_MIN_BYTES = 64 * 1024


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # faust reads committed records only in its own exactly-once mode, which Parley's processors do
        # not use; but workers close requests in transactions (workers/transactions.py), and a fenced
        # worker's aborted GenerationCompleted must never reach the context builder or the materializer.
        # aiokafka takes the level at construction and uses it when it starts (its fetcher).
        consumer._isolation_level = "read_committed"
        wait_ms = getattr(self.consumer.app, "parley_fetch_wait_ms", 0)
        if wait_ms:  # the processor's wiring trades latency for batches (Wiring.fetch_wait_ms)
            consumer._fetch_min_bytes, consumer._fetch_max_wait_ms = FETCH_MIN_BYTES, wait_ms
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class _App(faust.App):
    def _new_transport(self) -> faust_aiokafka.Transport:
        return _Transport(self.conf.broker_consumer, self)


def make_app(app_id: str, settings: KafkaSettings, **overrides: Any) -> faust.App:
    """A faust App for one processor; its consumer group is ``app_id``."""
    config: dict[str, Any] = {
        "broker": [f"kafka://{host}" for host in settings.bootstrap.split(",")],
        "broker_credentials": broker_credentials(settings),
        "store": "memory://",
        "web_enabled": False,
        "topic_replication_factor": settings.replication,
        "topic_allow_declare": False,  # `parley topics` owns every topic and its configs
        "producer_acks": -1,
        "broker_commit_every": 100,
        "broker_commit_interval": 1.0,
        "consumer_auto_offset_reset": "earliest",
    }
    config.update(overrides)
    return _App(app_id, **config)


def broker_credentials(settings: KafkaSettings) -> CredentialsT | None:
    """faust's form of the settings' SASL/SCRAM and TLS (parley.transport_security); faust's aiokafka
    driver hands them to every consumer and producer it makes. None: PLAINTEXT."""
    context = kafka_tls(settings)
    if settings.uses_sasl:  # SASL_SSL with a context, SASL_PLAINTEXT without
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_secret,
            ssl_context=context,
            mechanism=settings.sasl_mechanism,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def raw_topic(app: faust.App, settings: KafkaSettings, name: str) -> faust.TopicT:
    """A catalog topic as faust sees it: bytes in, bytes out."""
    return app.topic(
        settings.topic(name), key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw"
    )


async def decoded_records(
    app: faust.App, stream: faust.StreamT, consumer: str
) -> AsyncIterator[tuple[faust.EventT, Event]]:
    """Each record of ``stream`` with its event; undecodable records go to ``<topic>.dlq`` (and are acked
    when ``stream`` leaves acking to its reader)."""
    async for record in stream.events():
        try:
            if record.value is not None and len(record.value) > DEFAULT_MAX_EVENT_BYTES:
                raise EventTooLarge(f"record of {len(record.value)} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
            event = await codec.decode_async(record.value)  # keys fetched off the loop first (parley/keys.py)
        except codec.CodecError as exc:
            TRACE_ID.set("")
            await dead_letter(app, record, consumer, exc)
            if not stream.enable_acks:
                record.ack()
            continue
        TRACE_ID.set(event.trace_id)  # the agent's log lines about this event carry its request's trace id
        yield record, event


async def dead_letter(app: faust.App, record: faust.EventT, consumer: str, error: Exception) -> None:
    """Send ``record`` to its topic's DLQ and wait for the acknowledgement: nothing is lost."""
    msg = record.message
    letter = dead_letter_for(
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        key=msg.key,
        value=record.value,
        error=error,
        consumer=consumer,
    )
    await app.producer.send_and_wait(dlq_name(msg.topic), letter.key, codec.encode(letter), None, None, None)
    DEAD_LETTERS.labels(msg.topic, consumer).inc()
    log.warning(
        "dead-lettered a record",
        extra={"topic": msg.topic, "offset": msg.offset, "error_type": letter.error_type, "error": letter.error},
    )


# ------------------------------------------------------------------ the one runner


def processor_app(streams: StreamsSettings, kafka: KafkaSettings, processor: str) -> tuple[faust.App, str]:
    """The faust App of ``processor`` and its consumer group, with a datadir of its own."""
    group = streams.group(processor)
    datadir = streams.datadir / group
    datadir.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    # After a crash (no LeaveGroup) its partitions stay with the dead member until the session times out:
    # faust's 60 s default would stall every conversation of those partitions for a minute.
    session = streams.session_timeout_s
    app = make_app(
        group,
        kafka,
        datadir=str(datadir),
        broker_session_timeout=session,
        broker_client_id=f"{group}@{socket.gethostname()}-{os.getpid()}",  # who is who in `parley ops groups`
        broker_heartbeat_interval=min(3.0, session / 3),
    )
    return app, group


def wired_app(streams: StreamsSettings, kafka: KafkaSettings, processor: str, wiring: Wiring) -> faust.App:
    """``processor`` as a faust App: an agent per topic it reads, its tasks, timers and hooks."""
    app, group = processor_app(streams, kafka, processor)
    app.parley_fetch_wait_ms = wiring.fetch_wait_ms  # read when the consumer is created, at start
    sinks = {name: raw_topic(app, kafka, name) for name in wiring.writes}
    by_physical = {kafka.topic(a.topic): a.topic for a in wiring.agents}

    for agent in wiring.agents:
        app.agent(raw_topic(app, kafka, agent.topic), name=agent.topic)(
            _agent_loop(app, group, agent, sinks, streams.lanes)
        )
    for task in wiring.tasks:
        app.task(task)
    for timer in wiring.timers:
        app.timer(interval=timer.interval_s, name=f"{processor}.{timer.run.__name__}")(timer.run)

    def rebalance(hooks: Sequence[RebalanceHook]) -> Callable[..., Awaitable[None]]:
        async def tell(_: object, partitions: set[TP], **__: object) -> None:
            by_topic: dict[str, set[int]] = {}
            for tp in partitions:
                if tp.topic in by_physical:
                    by_topic.setdefault(by_physical[tp.topic], set()).add(tp.partition)
            for hook in hooks:
                for topic, ps in by_topic.items():
                    await hook(topic, ps)

        return tell

    readiness = Readiness()

    async def ready(_: object, partitions: set[TP], **__: object) -> None:
        readiness.ready()  # the group's assignment is held (tools/supervisor.py waits for this)

    app.on_partitions_assigned.connect(ready)
    if wiring.on_assigned:
        app.on_partitions_assigned.connect(rebalance(wiring.on_assigned))
    if wiring.on_revoked:
        app.on_partitions_revoked.connect(rebalance(wiring.on_revoked))
    for stop in wiring.on_stop:
        app.on_before_shutdown.connect(_ignoring_sender(stop))
    return app


def _agent_loop(
    app: faust.App, group: str, agent: Agent, sinks: Mapping[str, faust.TopicT], lanes: int
) -> Callable[[faust.StreamT], Awaitable[None]]:
    async def handle(item: tuple[faust.EventT, Event]) -> None:
        record, event = item
        TRACE_ID.set(event.trace_id)
        handler = agent.handler_for(event)
        if handler is None:  # no business on this topic: not dropped silently
            await dead_letter(app, record, group, TypeError(f"unexpected {type(event).__name__}"))
        else:
            try:
                out = await handler(event)
            except ValueError as exc:  # an id that is not a UUID, and the like: the record is bad
                await dead_letter(app, record, group, exc)
                out = []
            except Exception as exc:  # a bug meets this record: kept in the DLQ, not lost, not a crash loop
                log.exception("a handler failed; the record is dead-lettered", extra={"event": type(event).__name__})
                await dead_letter(app, record, group, exc)
                out = []
            for produced in out:
                partition = produced.partition if isinstance(produced, InferenceRouted) else None
                await send_event(sinks[topic_name_for(produced)], produced, partition=partition)
        # Only now may its offset be committed: what it produced is on the broker. A send that
        # failed leaves it unacknowledged and fails the agent (Lanes re-raises it); faust commits
        # only up to the first offset not acknowledged, so it and what follows are read again
        # by the next owner of the partition.
        record.ack()

    async def loop(stream: faust.StreamT) -> None:
        ordered = Lanes(lanes, LANE_DEPTH, handle, name=f"{group}:{agent.topic}")
        try:
            async for record, event in decoded_records(app, stream.noack(), consumer=group):
                await ordered.put(record.message.key, (record, event))
        finally:
            await ordered.close()

    loop.__name__ = f"handle_{agent.topic.replace('.', '_')}"
    return loop


def _ignoring_sender(stop: Callable[[], Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    async def receiver(*_: object, **__: object) -> None:
        await stop()

    return receiver


async def send_event(topic: faust.TopicT, event: Event, *, partition: int | None = None) -> None:
    """Produce ``event`` keyed by its catalog key and wait for the acknowledgement.

    Waiting keeps "acked input ⇒ output on the broker": faust commits the
    input offset once the agent moves on, so nothing may still be in flight then.
    """
    pending = await topic.send(key=event.key, value=await codec.encode_async(event), partition=partition)
    await pending
