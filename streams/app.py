"""The faust-streaming shell every processor shares: the one runner of a ``streams.wiring.Wiring``.

``wired_app`` turns any processor's wiring into a faust App (an agent per topic
it reads, dispatching by event type; produce with ack; dead-letter bad input,
retry the rest in place: streams/handling.py), so a
processor itself never imports faust. ``make_app`` builds a faust App from Parley's settings (faust speaks to Kafka
through aiokafka; both work against Kafka 4.x, proven by
``tests/integration/test_faust.py``), reading only committed records. Topics are raw bytes to faust: Parley's
codec decodes them, so an agent only ever sees current event types and a poison
record never stops a partition (``decoded_records`` does the same for a plain stream).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiokafka
import faust
from aiokafka.errors import KafkaTimeoutError, KafkaUnavailableError
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.auth import CredentialsT

from parley.cassandra import DRIVER_ERRORS
from parley.consumer import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, dead_letter_for
from parley.logs import TRACE_ID
from parley.metrics import DEAD_LETTERS, Readiness
from parley.settings import KafkaSettings
from parley.transport_security import kafka_tls
from schemas import codec
from schemas.catalog import dlq_name, topic_name_for
from schemas.events import Event, InferenceRouted
from streams.handling import TRANSIENT, RecordHandler, Rejected, Retry, Taken
from streams.lanes import Lanes
from streams.settings import StreamsSettings
from streams.wiring import Agent, RebalanceHook, Wiring

log = logging.getLogger(__name__)

#: Events queued per lane before the agent stops reading (streams/lanes.py).
LANE_DEPTH = 64
#: What a fetch waits to fill when the processor's wiring lets it wait (Wiring.fetch_wait_ms).
FETCH_MIN_BYTES = 64 * 1024
#: The exit status of a processor whose agent failed with records in hand (EX_SOFTWARE).
EXIT_AGENT_FAILED = 70
#: Transient for the runner (streams/handling.py): the Cassandra driver's errors, and aiokafka's timeouts,
#: which (unlike its connection errors) do not call themselves retriable.
TRANSIENT_HERE = (*TRANSIENT, *DRIVER_ERRORS, KafkaTimeoutError, KafkaUnavailableError)


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

    def _new_offset(self, tp: TP) -> int | None:
        """faust's commit position for ``tp``, never past a record still in hand.

        faust-streaming 0.15.3 commits past the record at the head of a partition while it is still being
        handled if the records after it are acknowledged (its head-gap guard is off by one: faust-streaming
        issue #606, fixed by its PR #707, unreleased). Here that is a record retried in place through an
        outage while other keys' lanes go on: a kill then loses it (bench.chaos --tools lost 6 tool
        results this way). As the upstream fix does: the acknowledged offsets at or past the smallest
        offset in hand wait until it is acknowledged."""
        in_hand = [m.offset for m in self._unacked_messages if m.tp == tp and not m.acked]
        if not in_hand:
            return super()._new_offset(tp)
        first = min(in_hand)
        acked = self._acked[tp]
        later = [o for o in acked if o >= first]
        acked[:] = [o for o in acked if o < first]
        try:
            return super()._new_offset(tp)
        finally:
            acked.extend(later)
            acked.sort()


class _Producer(faust_aiokafka.Producer):
    """Idempotent, as every Parley producer (docs/design.md §5): a send aiokafka retries after a lost
    acknowledgement is not written twice, nor reordered. faust turns idempotence on only in its
    exactly-once mode, which Parley does not use; the broker assigns the producer id on start."""

    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    Producer = _Producer


class _Worker(faust.Worker):
    """faust's worker without its terminal spinner. The spinner's log handler sets the root logger to DEBUG
    whatever ``-l`` says, so every debug call of aiokafka, faust and mode (several per fetch) built a log
    record only for the handlers to drop it: 9% of the moderation processor's CPU under load
    (``python -m bench.load --profile``)."""

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        self.spinner = None
        super().on_setup_root_logger(logger, level)


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
        # aiokafka retries a ListOffsets answered NotLeaderForPartition without refreshing its metadata,
        # so after a broker fails over a consumer asks the old leader until the next refresh (5 min by
        # default: a replicated chaos run saw the materializer stall that long). 15 s bounds the stall.
        "consumer_metadata_max_age_ms": 15_000,
        "producer_metadata_max_age_ms": 15_000,
        "Worker": _Worker,
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
            event = await decode(record)
        except codec.CodecError as exc:
            TRACE_ID.set("")
            await dead_letter(app, record, consumer, exc)
            if not stream.enable_acks:
                record.ack()
            continue
        TRACE_ID.set(event.trace_id)  # the agent's log lines about this event carry its request's trace id
        yield record, event


async def decode(record: Taken) -> Event:
    """The event of a record; ``codec.CodecError`` (``EventTooLarge`` past 512 KiB) when it has none. Its keys
    are fetched off the loop first (parley/keys.py): ``KeyUnavailable`` while they cannot be, a transient."""
    if record.value is not None and len(record.value) > DEFAULT_MAX_EVENT_BYTES:
        raise EventTooLarge(f"record of {len(record.value)} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
    return await codec.decode_async(record.value)


async def dead_letter(
    app: faust.App, record: faust.EventT, consumer: str, error: BaseException, *, gave_up: bool = False
) -> None:
    """Send ``record`` to its topic's DLQ and wait for the acknowledgement: nothing is lost."""
    msg = record.message
    letter = dead_letter_for(
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        key=msg.key,
        value=record.value,
        error=error,  # type: ignore[arg-type]
        consumer=consumer,
    )
    if gave_up or not isinstance(error, (codec.CodecError, ValueError)):
        # Not the codec's or a core's word on bad input: its text may quote what was being handled, so it
        # is kept only sealed under the record's owner (``detail``), never in the clear.
        letter = dataclasses.replace(letter, error_type="handler_error", error=type(error).__name__)
    await app.producer.send_and_wait(dlq_name(msg.topic), letter.key, await codec.encode_async(letter), None, None, None)
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
            _agent_loop(app, group, processor, agent, sinks, streams.lanes)
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
    app: faust.App,
    group: str,
    processor: str,
    agent: Agent,
    sinks: Mapping[str, faust.TopicT],
    lanes: int,
    *,
    exit_process: Callable[[int], object] = os._exit,
) -> Callable[[faust.StreamT], Awaitable[None]]:
    async def send(produced: Event) -> None:
        partition = produced.partition if isinstance(produced, InferenceRouted) else None
        await send_event(sinks[topic_name_for(produced)], produced, partition=partition)

    async def reject(record: Taken, rejected: Rejected) -> None:
        await dead_letter(app, record, group, rejected.error, gave_up=rejected.gave_up)  # type: ignore[arg-type]

    def owns(record: Taken) -> bool:
        try:
            return record.message.tp in app.consumer.assignment()  # type: ignore[attr-defined]
        except Exception:  # a consumer between assignments: keep trying, a revocation comes as a rebalance
            return True

    # A record is acknowledged only once what it produced (or its dead letter) is on the broker; faust
    # commits only up to the first offset not acknowledged, so a record being retried holds the commit.
    handle = RecordHandler(
        agent, Retry(processor, transient=TRANSIENT_HERE), decode=decode, send=send, dead_letter=reject, owns=owns
    )

    def fail(exc: Exception) -> None:
        # The handler retries or dead-letters every error, so this is a bug in the runner. faust would
        # restart the agent on the same stream, past the records the lanes held: holes not read again
        # until a rebalance, while the other lanes go on. Exit instead, as a kill would: the group
        # reassigns the partitions, read again from the last commit, which stops before the first record
        # not acknowledged.
        log.critical(
            "an agent failed with records in hand; exiting so they are read again",
            extra={"processor": processor, "topic": agent.topic, "error_type": type(exc).__name__},
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        exit_process(EXIT_AGENT_FAILED)

    async def handle_or_exit(record: Taken) -> None:
        try:
            await handle(record)
        except Exception as exc:
            fail(exc)
            raise

    async def loop(stream: faust.StreamT) -> None:
        ordered = Lanes(lanes, LANE_DEPTH, handle_or_exit, name=f"{group}:{agent.topic}")
        try:
            async for record in stream.noack().events():
                await ordered.put(record.message.key, record)
        except Exception as exc:
            fail(exc)
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
