"""The audit's I/O: ``chat.events`` read whole, the tables of the conversations it names.

``tools.audit`` is the pure comparison; ``run_audit`` reads both sides and
hands them to it, again until the rows agree or ``wait_s`` ran out (the
materializer may still be catching up).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from cassandra.concurrent import execute_concurrent_with_args
from cassandra.cluster import Session
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from parley.cassandra import connect
from parley.consumer import poll_batch, reached, reader, watermarks
from parley.errors import BrokerUnavailable
from parley.settings import CassandraSettings, KafkaSettings
from schemas import codec
from schemas import events as ev
from tools.audit import Report, audit

#: Longest a read of the log may go without a record before the broker counts as gone.
STALL_S = 30.0


def read_log(kafka: KafkaSettings, topic: str = "chat.events") -> tuple[list[ev.Event], int]:
    """Every event of ``topic`` up to the end offsets it had when called, in partition order; and how many
    records did not decode. Outside any group: nothing is committed, nobody's offsets move."""
    name = kafka.topic(topic)
    consumer = reader(kafka, "audit")
    try:
        try:
            meta = consumer.list_topics(name, timeout=10).topics[name]
            if meta.error is not None:
                raise BrokerUnavailable(f"cannot read {name}: {meta.error} (PARLEY_KAFKA_BOOTSTRAP, PARLEY_TOPIC_PREFIX)")
            ends = {p: watermarks(consumer, TopicPartition(name, p), 10)[1] for p in meta.partitions}
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot reach Kafka at {kafka.bootstrap} (PARLEY_KAFKA_BOOTSTRAP): {exc}") from exc
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in pending])
        by_partition: dict[int, list[ev.Event]] = {p: [] for p in pending}
        undecodable = 0
        last = time.monotonic()
        while pending:
            batch = poll_batch(consumer, 500, 1.0)
            if batch:
                last = time.monotonic()
            elif time.monotonic() - last > STALL_S:
                raise BrokerUnavailable(f"reading {name} stalled with partitions {sorted(pending)} unfinished")
            for msg in batch:
                if msg.error():
                    continue
                p, offset = msg.partition(), msg.offset()
                if p not in pending or offset >= ends[p]:
                    continue
                if msg.value() is not None:
                    try:
                        by_partition[p].append(codec.decode(msg.value()))
                    except codec.CodecError:
                        undecodable += 1
            for _, p in reached(consumer, {(name, p): ends[p] for p in pending}):
                pending.discard(p)
        return [e for p in sorted(by_partition) for e in by_partition[p]], undecodable
    finally:
        consumer.close()


def _rows(session: Session, cql: str, args: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    statement = session.prepare(cql)
    out: list[dict[str, Any]] = []
    for ok, result in execute_concurrent_with_args(session, statement, list(args), concurrency=32, raise_on_first_error=True):
        out.extend(row._asdict() for row in result)
    return out


def read_tables(session: Session, events: list[ev.Event]) -> dict[str, list[dict[str, Any]]]:
    """The rows of the conversations (and their users) that ``events`` name."""
    cids = sorted({str(getattr(e, "conversation_id")) for e in events if hasattr(e, "conversation_id")})
    ids = [(uuid.UUID(c),) for c in cids if _is_uuid(c)]
    users = sorted({e.user_id for e in events if isinstance(e, ev.ConversationEvent) and e.user_id})
    return {
        table: _rows(session, f"SELECT * FROM {table} WHERE conversation_id = ?", ids)
        for table in ("conversations", "messages", "summaries")
    } | {"conversations_by_user": _rows(session, "SELECT * FROM conversations_by_user WHERE user_id = ?", [(u,) for u in users])}


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def run_audit(kafka: KafkaSettings, cassandra: CassandraSettings, wait_s: float = 0.0) -> tuple[Report, int]:
    """The audit of the log as it stands now; re-read until its rows agree or ``wait_s`` passed.
    Returns the report and the count of undecodable records."""
    deadline = time.monotonic() + wait_s
    session = connect(cassandra, cassandra.keyspace)
    try:
        while True:
            events, undecodable = read_log(kafka)
            report = audit(events, read_tables(session, events))
            if report.row_problems == 0 and not report.turns.in_flight or time.monotonic() >= deadline:
                return report, undecodable
            time.sleep(1.0)
    finally:
        session.cluster.shutdown()
