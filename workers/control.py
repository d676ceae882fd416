"""chat.control, read whole by every worker: cancels are broadcast, not load-balanced.

No consumer group: the listener assigns itself every partition, so every
worker sees every GenerationCancelRequested and acts on those for requests it
holds. It starts ``lookback_s`` before now rather than at the very end, so a
worker that just took over a partition still honours a cancel sent moments
before it started. It commits nothing; a restart looks back again.

A record that does not decode is logged and skipped, not dead-lettered:
every worker reads the same record, and N copies in the DLQ would help no one.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

from parley.consumer import read_events, reader
from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.events import GenerationCancelRequested


TOPIC = "chat.control"


class ControlListener:
    """Blocking: call ``poll`` from a thread."""

    def __init__(self, kafka: KafkaSettings, lookback_s: float, timeout_s: float = 10.0) -> None:
        self.topic = kafka.topic(TOPIC)
        self.skipped = 0
        self._consumer = reader(kafka, "worker-control", auto_offset_reset="latest")
        try:
            self._consumer.assign(self._start_positions(lookback_s, timeout_s))
        except BaseException:
            self._consumer.close()
            raise

    def _start_positions(self, lookback_s: float, timeout_s: float) -> list[TopicPartition]:
        try:
            meta = self._consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot read metadata of {self.topic} (PARLEY_KAFKA_BOOTSTRAP): {exc}") from exc
        if meta is None or meta.error is not None or not meta.partitions:
            raise BrokerUnavailable(f"topic {self.topic} does not exist; `parley topics` creates it")
        since_ms = int((time.time() - lookback_s) * 1000)
        wanted = [TopicPartition(self.topic, p, since_ms) for p in sorted(meta.partitions)]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = self._consumer.offsets_for_times(wanted, timeout=timeout_s)
                break
            except KafkaException as exc:
                # A leader election (new topic, broker restart) answers NOT_LEADER for a moment; librdkafka
                # does not flag that as retriable here, so every error is retried until the deadline.
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(f"cannot look up offsets of {self.topic}: {exc}") from exc
                time.sleep(0.2)
        # -1: nothing that recent in the partition, so start at its end.
        return [TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found]

    def poll(self, timeout: float = 0.2, max_records: int = 500) -> list[GenerationCancelRequested]:
        events, skipped = read_events(self._consumer, GenerationCancelRequested, max_records, timeout, "control")
        self.skipped += skipped
        return events

    def close(self) -> None:
        self._consumer.close()
