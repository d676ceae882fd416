"""The ``schemas`` topic: every writer's Avro schemas, so an older reader can read a newer writer.

A rolling deploy upgrades services one at a time, and every service both writes and reads events
(the gateway writes MessagePosted and reads TokenChunk, the workers the other way round), so no
deploy order puts every reader before every writer. Instead each process publishes the schemas
it writes with (``publish``: keyed by fingerprint, on a compacted topic, acknowledged by all
in-sync replicas) before it produces anything; a reader that meets a fingerprint it does not ship
looks it up here (``KafkaSchemaSource``) and the codec reads the record through Avro schema
resolution into its own type. This is the Confluent Schema Registry's storage model (a compacted
``_schemas`` topic) without its server: the fingerprint in each record is the lookup key.

What it cannot do: an event type a reader has never heard of stays unknown to it (dead-lettered as
``unknown_schema``), so a new event type still ships readers first (docs/operations.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, Producer, TopicPartition

from parley.consumer import poll_batch, reached, reader, watermarks
from parley.errors import BrokerUnavailable
from parley.kafka import producer_config
from parley.settings import KafkaSettings
from schemas import catalog, codec

log = logging.getLogger(__name__)

TOPIC = catalog.SCHEMAS.name
#: How long a fingerprint found nowhere is not asked for again (a record of garbage, not a deploy:
#: a writer's schemas are in the topic before its first record is).
MISS_TTL_S = 60.0
_MAX_MISSES = 1024


def publish(settings: KafkaSettings, avro_dir: Path = codec.AVRO_DIR, timeout_s: float = 30.0) -> int:
    """Every current schema of this binary (its ``.avsc`` files) onto the topic; returns how many.
    Raises ``BrokerUnavailable`` unless all were acknowledged: a writer must not write before its
    schemas are readable."""
    # Not idempotent: a repeated schema record is harmless on a compacted topic keyed by fingerprint, and
    # a short-lived idempotent producer torn down while it still acquires its producer id (a slow
    # SASL_SSL broker, a retry after a timeout) trips an assertion in librdkafka that aborts the process.
    producer = Producer(producer_config(settings, **{"enable.idempotence": False}))
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    paths = sorted(avro_dir.glob("*.avsc"))
    for path in paths:
        raw = json.loads(path.read_text())
        key = codec.fingerprint(raw).hex().encode()
        producer.produce(settings.topic(TOPIC), key=key, value=json.dumps(raw, sort_keys=True).encode(), on_delivery=delivered)
    left = producer.flush(timeout_s)
    if left or failed:
        raise BrokerUnavailable(f"publishing schemas to {settings.topic(TOPIC)}: {left} unacknowledged, {failed[:1]}")
    return len(paths)


class KafkaSchemaSource:
    """Looks fingerprints up in the topic: read up to its end when a fingerprint is not held yet (from
    where the last read stopped: what was read is held), at most once per ``MISS_TTL_S`` for one that
    is nowhere."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._held: dict[bytes, dict[str, Any]] = {}
        self._missed: dict[bytes, float] = {}
        self._next = OFFSET_BEGINNING  # where the next read starts
        self._lock = threading.Lock()  # one read of the topic at a time; the rest find its result

    def lookup(self, fp: bytes) -> dict[str, Any] | None:
        with self._lock:
            if fp in self._held:
                return self._held[fp]
            if time.monotonic() - self._missed.get(fp, -MISS_TTL_S) < MISS_TTL_S:
                return None
            self._held.update(self._read())
            if fp in self._held:
                self._missed.pop(fp, None)
                return self._held[fp]
            if len(self._missed) >= _MAX_MISSES:
                self._missed.clear()
            self._missed[fp] = time.monotonic()
            log.warning("schema fingerprint in no schema published", extra={"fingerprint": fp.hex()})
            return None

    def _read(self) -> dict[bytes, dict[str, Any]]:
        name = self._settings.topic(TOPIC)
        consumer = reader(self._settings, "schemas")
        try:
            try:
                end = watermarks(consumer, TopicPartition(name, 0), 10)[1]
            except KafkaException as exc:
                raise BrokerUnavailable(f"cannot read {name}: {exc}") from exc
            if end <= 0 or end <= self._next:
                return {}
            consumer.assign([TopicPartition(name, 0, self._next)])
            found: dict[bytes, dict[str, Any]] = {}
            deadline = time.monotonic() + 30
            while not reached(consumer, {(name, 0): end}):
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(f"reading {name} did not reach its end")
                for msg in poll_batch(consumer, 500, 1.0):
                    if msg.error() or msg.key() is None or msg.value() is None:
                        continue
                    try:
                        found[bytes.fromhex(msg.key().decode())] = json.loads(msg.value())
                    except (ValueError, UnicodeDecodeError):
                        continue  # not a record of ours: the codec checks what it learns against its fingerprint
            self._next = end
            return found
        finally:
            consumer.close()


def install(settings: KafkaSettings, max_pause_s: float = 10.0) -> None:
    """For a process that writes and reads events, at start: its schemas published (waiting for
    Kafka as long as it takes: it must not write before), newer ones looked up from then on."""
    pause = 0.5
    while True:
        try:
            publish(settings)
            break
        except BrokerUnavailable as exc:
            log.warning("publishing schemas failed; retrying", extra={"retry_in_s": pause, "error": str(exc)})
            time.sleep(pause)
            pause = min(pause * 2, max_pause_s)
    codec.install_source(KafkaSchemaSource(settings))
