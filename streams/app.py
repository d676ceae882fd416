"""The faust-streaming shell every processor shares.

``make_app`` builds a faust App from Parley's settings (faust speaks to Kafka
through aiokafka; both work against Kafka 4.x, proven by
``tests/integration/test_faust.py``), reading only committed records. Topics are raw bytes to faust: Parley's
codec decodes them, and ``decoded`` dead-letters what it cannot decode, so an
agent only ever sees current event types and a poison record never stops a
partition.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from parley.consumer import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, dead_letter_for
from parley.logs import TRACE_ID
from parley.metrics import DEAD_LETTERS
from parley.settings import KafkaSettings
from schemas import codec
from schemas.catalog import dlq_name
from schemas.events import Event

log = logging.getLogger(__name__)


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # faust reads committed records only in its own exactly-once mode, which Parley's processors do
        # not use; but workers close requests in transactions (workers/transactions.py), and a fenced
        # worker's aborted GenerationCompleted must never reach the context builder or the materializer.
        # aiokafka takes the level at construction and uses it when it starts (its fetcher).
        consumer._isolation_level = "read_committed"
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


def raw_topic(app: faust.App, settings: KafkaSettings, name: str) -> faust.TopicT:
    """A catalog topic as faust sees it: bytes in, bytes out."""
    return app.topic(
        settings.topic(name), key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw"
    )


async def decoded(app: faust.App, stream: faust.StreamT, consumer: str) -> AsyncIterator[Event]:
    """The events of ``stream``, decoded; undecodable records go to ``<topic>.dlq``."""
    async for record in stream.events():
        try:
            if record.value is not None and len(record.value) > DEFAULT_MAX_EVENT_BYTES:
                raise EventTooLarge(f"record of {len(record.value)} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
            event = codec.decode(record.value)
        except codec.CodecError as exc:
            TRACE_ID.set("")
            await dead_letter(app, record, consumer, exc)
            continue
        TRACE_ID.set(event.trace_id)  # the agent's log lines about this event carry its request's trace id
        yield event


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
