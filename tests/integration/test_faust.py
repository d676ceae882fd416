"""A faust-streaming agent (aiokafka underneath) consumes and produces through real Kafka 4.x,
reads committed records only, and dead-letters poison through the shared DLQ shape; the one runner
(``streams.app.wired_app``) dead-letters bad input and retries an outage in place, in order."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer

from parley.settings import KafkaSettings
from schemas import codec
from schemas.events import GenerationCancelRequested, TokenChunk
from streams.app import make_app

PROBE = Path(__file__).with_name("faust_probe.py")
RUNNER_PROBE = Path(__file__).with_name("runner_probe.py")
ROOT = Path(__file__).resolve().parents[2]


def _read(kafka: KafkaSettings, topic: str, want: int, timeout: float, key: bytes) -> list:
    """The first ``want`` events keyed ``key`` (other tests share these topics)."""
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([kafka.topic(topic)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error() and msg.key() == key:
            out.append(codec.decode(msg.value()))
    consumer.close()
    return out


def test_faust_agent_relays_committed_events_and_dead_letters_poison(kafka: KafkaSettings, tmp_path: Path) -> None:
    cid = str(uuid.uuid4())
    events = [GenerationCancelRequested(conversation_id=cid, user_id="u", request_id=f"r{i}", reason="user") for i in range(5)]
    # An aborted transaction's record first (what a fenced worker leaves): the agent must never see it.
    fenced = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"probe-{uuid.uuid4().hex[:6]}"})
    fenced.init_transactions(30)
    fenced.begin_transaction()
    voided = GenerationCancelRequested(conversation_id=cid, user_id="u", request_id="aborted", reason="user")
    fenced.produce(kafka.topic("chat.control"), key=voided.key, value=codec.encode(voided))
    fenced.flush(30)
    fenced.abort_transaction(30)
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    raw.produce(kafka.topic("chat.control"), key=cid.encode(), value=b"\x00poison")
    for e in events:
        raw.produce(kafka.topic("chat.control"), key=e.key, value=codec.encode(e))
    assert raw.flush(30) == 0

    env = os.environ | {
        "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
        "PROBE_IN": "chat.control",
        "PROBE_OUT": "chat.usage",
        "PROBE_GROUP": f"faust-probe-{uuid.uuid4().hex[:6]}",
        "PROBE_DATADIR": str(tmp_path / "faust"),
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "probe.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(PROBE), "worker", "--without-web", "-l", "warn"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        relayed = _read(kafka, "chat.usage", len(events), timeout=90, key=cid.encode())
        letters = _read(kafka, "chat.control.dlq", 1, timeout=30, key=cid.encode())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert relayed == events, log.read_text()[-3000:]
    assert [(l.raw_key, l.raw_value, l.error_type) for l in letters] == [
        (cid.encode(), b"\x00poison", "undecodable")
    ]


def test_the_runner_retries_an_outage_in_place_in_order_and_dead_letters_only_bad_input(kafka: KafkaSettings, tmp_path: Path) -> None:
    cid = str(uuid.uuid4())
    asked = ["flaky", "after-flaky", "bad", "last"]  # one conversation: one partition, one lane, this order
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    raw.produce(kafka.topic("chat.control"), key=cid.encode(), value=b"\x00poison")
    for rid in asked:
        e = GenerationCancelRequested(conversation_id=cid, user_id="u", request_id=rid, reason="user")
        raw.produce(kafka.topic("chat.control"), key=e.key, value=codec.encode(e))
    assert raw.flush(30) == 0

    env = os.environ | {
        "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
        "PARLEY_STREAMS_GROUP_PREFIX": f"runner-probe-{uuid.uuid4().hex[:6]}.",
        "PARLEY_STREAMS_DATADIR": str(tmp_path / "faust"),
        "PARLEY_METRICS_PORT": "0",
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "runner-probe.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(RUNNER_PROBE), "worker", "--without-web", "-l", "warn"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        answered = _read(kafka, "chat.tokens", 3, timeout=90, key=cid.encode())
        letters = _read(kafka, "chat.control.dlq", 2, timeout=30, key=cid.encode())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    # The outage was retried in place (twice), and the record after it waited for it.
    assert [c.request_id for c in answered if isinstance(c, TokenChunk)] == ["flaky", "after-flaky", "last"], text[-3000:]
    assert text.count("retrying in place") == 2, text[-3000:]
    # Only the poison and the bad input were dead-lettered, each at once.
    assert [(l.raw_value == b"\x00poison", l.error_type) for l in letters] == [(True, "undecodable"), (False, "invalid")]
    assert codec.decode(letters[1].raw_value).request_id == "bad"


def test_processor_producer_is_idempotent(kafka: KafkaSettings) -> None:
    """design.md §5: every producer is idempotent, the faust processors' too. faust turns idempotence on
    only in its exactly-once mode, so ``make_app`` asks for it; the broker proves it took effect by
    assigning the producer an id (InitProducerId), which a plain producer never asks for."""

    async def produce_one() -> tuple[bool, int]:
        producer = make_app(f"idempotence-{uuid.uuid4().hex[:6]}", kafka).producer
        await producer.start()
        try:
            topic = kafka.topic("chat.control")
            await producer.send_and_wait(topic, key=b"idempotence", value=b"probe", partition=None, timestamp=None, headers=None)
            txn = producer._producer._txn_manager  # aiokafka's: made only for an idempotent producer
            return txn is not None, (txn.producer_id if txn is not None else -1)
        finally:
            await producer.stop()

    idempotent, producer_id = asyncio.run(produce_one())
    assert idempotent
    assert producer_id >= 0  # assigned by the broker
