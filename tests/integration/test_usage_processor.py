"""The usage processor (``python -m streams usage``) on the real Kafka and Cassandra.

UsageRecorded events go to ``chat.usage``; the processor folds them into
``usage_by_request``; the totals Cassandra sums (the gateway's own queries,
``gateway.quotas.QuotaStore``) must equal the pure fold of the distinct events
(``streams.usage_fold.fold``) after the same events are produced again and
after a second consumer group re-reads the whole topic: redelivery never
counts twice.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from dataclasses import replace
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from gateway.quotas import QuotaStore
from parley.consumer import poll_batch, watermarks
from parley.kafka import EventProducer
from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS, dlq_name
from schemas.events import DeadLetter, Usage, UsageRecorded
from streams.usage_fold import Totals, fold
from tests.integration.test_streams_pipeline import DEADLINE, Worker, lag, worker_env

TODAY = datetime.now(timezone.utc).replace(hour=12, minute=0, second=0, microsecond=0)
YESTERDAY_US = int(TODAY.timestamp() * 1_000_000) - 86_400 * 1_000_000


def _events(users: list[str]) -> list[UsageRecorded]:
    out = []
    for u, user in enumerate(users):
        for i in range(12):
            out.append(
                UsageRecorded(
                    conversation_id=str(uuid.uuid4()),
                    user_id=user,
                    request_id=str(uuid.uuid4()),
                    attempt=0,
                    model=("small-model", "big-model")[i % 2],
                    pool="small",
                    usage=Usage(prompt_tokens=100 + i, cached_tokens=i, completion_tokens=10 * (u + 1) + i),
                    occurred_at=YESTERDAY_US if i == 0 else int(TODAY.timestamp() * 1_000_000) + i,
                )
            )
        first = out[-12]  # a generation resumed after a failure: attempt 1 of the same request
        out.append(
            UsageRecorded(
                conversation_id=first.conversation_id,
                user_id=user,
                request_id=first.request_id,
                attempt=1,
                model=first.model,
                usage=Usage(prompt_tokens=50, completion_tokens=5),
                occurred_at=first.occurred_at + 5,
            )
        )
    return out


def _quota_store(session: Any, keyspace: str) -> QuotaStore:
    """The gateway's quota store on the test's session."""
    return QuotaStore(AsyncCql(replace(from_env(CassandraSettings), keyspace=keyspace), session))


def _stored(session: Any, keyspace: str, users: list[str]) -> dict[tuple[str, date, str], Totals]:
    store = _quota_store(session, keyspace)
    days = [TODAY.date(), date.fromordinal(TODAY.date().toordinal() - 1)]

    async def read() -> dict[tuple[str, date, str], Totals]:
        out: dict[tuple[str, date, str], Totals] = {}
        for user in users:
            for (day, model), t in (await store.usage(user, days)).items():
                out[(user, day, model)] = t
        return out

    return asyncio.run(read())


def _tokens_today(session: Any, keyspace: str, user: str) -> int:
    return asyncio.run(_quota_store(session, keyspace).tokens_on(user, TODAY.date()))


def _wait_caught_up(kafka: KafkaSettings, group: str, worker: Worker) -> None:
    deadline = time.monotonic() + DEADLINE
    while lag(kafka, group, "chat.usage") > 0:
        assert worker.proc.poll() is None, f"{group} exited\n{worker.tail()}"
        assert time.monotonic() < deadline, f"{group} did not catch up on chat.usage\n{worker.tail()}"
        time.sleep(0.5)


def _dead_letters(kafka: KafkaSettings) -> list[DeadLetter]:
    """Every record on chat.usage.dlq, decoded."""
    name = kafka.topic(dlq_name("chat.usage"))
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"dlq-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        parts = [TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS[dlq_name("chat.usage")].partitions)]
        c.assign(parts)
        ends = {p.partition: watermarks(c, p, 10)[1] for p in parts}
        seen: dict[int, int] = {p: 0 for p in ends}
        out: list[DeadLetter] = []
        deadline = time.monotonic() + 30
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in poll_batch(c, 500, 1.0):
                if msg.error():
                    continue
                seen[msg.partition()] = msg.offset() + 1
                letter = codec.decode(msg.value())
                assert isinstance(letter, DeadLetter)
                out.append(letter)
        return out
    finally:
        c.close()


def test_usage_totals_equal_the_fold_of_distinct_events_after_redelivery(
    kafka: KafkaSettings, cassandra: Any, cassandra_settings: CassandraSettings, tmp_path: Path
) -> None:
    session, keyspace, tmp = cassandra, cassandra_settings.keyspace, tmp_path
    users = [f"usage-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    events = _events(users)
    expected = fold(events)
    assert len(expected) == 3 * 3  # per user: two models today, one yesterday

    producer = EventProducer(kafka)
    first_prefix = f"it-usage-{uuid.uuid4().hex[:6]}."
    first = Worker("usage", worker_env(kafka, keyspace, first_prefix, tmp / "faust"), tmp / "usage-1.log")
    second: Worker | None = None
    try:
        for e in events:
            producer.produce_sync(e)
        # A record that is not an event at all: dead-lettered, and the partition carries on.
        raw = Producer({"bootstrap.servers": kafka.bootstrap})
        raw.produce(kafka.topic("chat.usage"), key=users[0].encode(), value=b"not an event")
        raw.flush(10)
        _wait_caught_up(kafka, f"{first_prefix}streams.usage", first)
        assert _stored(session, keyspace, users) == expected

        # The same events again (a producer retrying, a worker re-emitting): same rows, same totals.
        for e in events:
            producer.produce_sync(e)
        _wait_caught_up(kafka, f"{first_prefix}streams.usage", first)
        assert _stored(session, keyspace, users) == expected

        # The processor dies without notice; a new group re-reads everything (every event twice now).
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=30)
        second_prefix = f"it-usage-{uuid.uuid4().hex[:6]}."
        second = Worker("usage", worker_env(kafka, keyspace, second_prefix, tmp / "faust"), tmp / "usage-2.log")
        _wait_caught_up(kafka, f"{second_prefix}streams.usage", second)
        assert _stored(session, keyspace, users) == expected

        for user in users:
            today = [t for (u, day, _), t in expected.items() if u == user and day == TODAY.date()]
            assert _tokens_today(session, keyspace, user) == sum(t.total_tokens for t in today)

        letters = _dead_letters(kafka)  # one per group that met the bad record
        assert letters and len({(d.source_partition, d.source_offset) for d in letters}) == 1
    finally:
        producer.close()
        first.stop()
        if second is not None:
            second.stop()
