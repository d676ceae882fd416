"""Events through real Kafka with the codec: order per conversation, and poison to the DLQ."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from dataclasses import replace

import fastavro
import pytest

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from parley.consumer import Delivery, EventConsumer, read_events, reader
from parley.kafka import EventProducer, admin
from parley.topics import ensure_topics
from schemas.catalog import TOPICS
from parley.settings import KafkaSettings
from schemas import codec
from schemas.events import DeadLetter, TokenChunk
from tests.unit.parley.test_kafka import count_wakeups


def _drain(consumer: EventConsumer, want: int, timeout: float = 30.0, mine=lambda d: True) -> list[Delivery]:
    """The first ``want`` deliveries that are ``mine`` (other tests may share the topic)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for d in consumer.poll(timeout=0.5):
            if mine(d):
                got.append(d)
            consumer.done(d)
    return got


def _chunk(cid: str, seq: int) -> TokenChunk:
    return TokenChunk(conversation_id=cid, user_id="u", request_id=f"r-{cid}", seq=seq, text=f"t{seq} ")


def test_events_round_trip_and_keep_order_per_conversation(kafka: KafkaSettings) -> None:
    producer = EventProducer(kafka)
    conversations = [str(uuid.uuid4()) for _ in range(5)]
    sent = [_chunk(cid, seq) for seq in range(20) for cid in conversations]  # interleaved
    for event in sent:
        producer.produce(event, lambda err, msg: None)
    assert producer.flush(30) == 0

    consumer = EventConsumer(kafka, f"test-order-{uuid.uuid4().hex[:6]}", ["chat.tokens"], producer)
    try:
        got = _drain(consumer, len(sent), mine=lambda d: d.event.conversation_id in conversations)
    finally:
        consumer.close()
        producer.close()
    mine = [d for d in got if d.event.conversation_id in conversations]
    assert sorted((d.event for d in mine), key=lambda e: (e.conversation_id, e.seq)) == sorted(
        sent, key=lambda e: (e.conversation_id, e.seq)
    )
    for cid in conversations:
        of_cid = [d for d in mine if d.event.conversation_id == cid]
        assert [d.event.seq for d in of_cid] == list(range(20))  # total order per key
        assert len({d.partition for d in of_cid}) == 1
        assert all(d.key == cid.encode() for d in of_cid)


async def test_send_nowait_keeps_the_order_of_the_calls_and_wakes_the_loop_per_burst(
    kafka: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = EventProducer(kafka)
    cid = str(uuid.uuid4())
    wakeups = count_wakeups(monkeypatch)
    try:
        futures = [producer.send_nowait(_chunk(cid, seq)) for seq in range(200)]
        delivered = await asyncio.wait_for(asyncio.gather(*futures), 30)
    finally:
        producer.close()
    assert len({d.partition for d in delivered}) == 1
    offsets = [d.offset for d in delivered]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)  # acknowledged in the order sent
    assert len(wakeups) <= len(futures) // 4  # acknowledgements come in bursts, each one wake-up


def _invalid_but_decodable() -> bytes:
    """A TokenChunk whose finish_reason breaks the rule, as a buggy producer might write it."""
    fp, parsed = codec.default_schemas().current["TokenChunk"]
    buf = io.BytesIO()
    record = codec.to_record(_chunk("x", 0)) | {"finish_reason": "exploded"}
    fastavro.schemaless_writer(buf, parsed, record)
    return codec.MAGIC + fp + buf.getvalue()


def test_poison_goes_to_the_dlq_and_consumption_continues(kafka: KafkaSettings) -> None:
    from confluent_kafka import Consumer, Producer

    cid = str(uuid.uuid4())
    topic = kafka.topic("chat.control")
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    poison = {
        b"not avro at all": "undecodable",
        codec.MAGIC + b"\x01" * 8 + b"?": "unknown_schema",
        _invalid_but_decodable(): "invalid",
        codec.MAGIC + b"\x00" * 600_000: "oversize",
    }
    for value in poison:
        raw.produce(topic, key=cid.encode(), value=value)
    producer = EventProducer(kafka)
    good = TokenChunk(conversation_id=cid, user_id="u", request_id="r", seq=1)
    raw.produce(topic, key=cid.encode(), value=codec.encode(good))  # a valid event after the poison
    assert raw.flush(30) == 0

    group = f"test-dlq-{uuid.uuid4().hex[:6]}"
    consumer = EventConsumer(kafka, group, ["chat.control"], producer)
    try:
        got = _drain(consumer, 1, mine=lambda d: d.event.conversation_id == cid)
        assert [d.event for d in got] == [good]
        assert consumer.dead_lettered >= len(poison)
        consumer.commit()
    finally:
        consumer.close()

    dlq = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group + "-reader", "auto.offset.reset": "earliest"})
    dlq.subscribe([kafka.topic("chat.control.dlq")])
    letters: list[DeadLetter] = []
    deadline = time.monotonic() + 20
    while len(letters) < len(poison) and time.monotonic() < deadline:
        msg = dlq.poll(0.5)
        if msg is not None and not msg.error():
            letter = codec.decode(msg.value())
            if letter.raw_key == cid.encode():
                letters.append(letter)
    dlq.close()
    producer.close()
    assert sorted(l.error_type for l in letters) == sorted(poison.values())
    for letter in letters:
        assert letter.source_topic == topic and letter.consumer == group
        assert letter.raw_value in poison
        assert poison[letter.raw_value] == letter.error_type
    assert len({l.source_offset for l in letters}) == len(poison)


def test_committed_offsets_resume_after_the_last_done_record(kafka: KafkaSettings) -> None:
    """A new member of the group starts after what the previous one marked done: no redelivery, no gap."""
    kafka = replace(kafka, topic_prefix=f"{kafka.topic_prefix}commit-{uuid.uuid4().hex[:4]}.")
    client = admin(kafka)
    ensure_topics(kafka, client, [TOPICS["chat.usage"]])  # a topic of its own: nobody else's records
    producer = EventProducer(kafka)
    cid = str(uuid.uuid4())
    for seq in range(6):
        producer.produce_sync(_chunk(cid, seq), topic=kafka.topic("chat.usage"))
    group = f"test-commit-{uuid.uuid4().hex[:6]}"
    first = EventConsumer(kafka, group, ["chat.usage"], producer)
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 3 and time.monotonic() < deadline:
        for d in first.poll(timeout=0.5, max_records=1):
            if len(seen) < 3:
                seen.append(d.event.seq)
                first.done(d)
    first.close()  # commits 0..2 only

    second = EventConsumer(kafka, group, ["chat.usage"], producer)
    rest = [d.event.seq for d in _drain(second, 3, mine=lambda d: d.event.conversation_id == cid)]
    second.close()
    producer.close()
    for fut in client.delete_topics([kafka.topic("chat.usage")]).values():
        fut.result()
    assert seen == [0, 1, 2]
    assert rest == [3, 4, 5]


def test_a_record_whose_key_cannot_be_read_is_read_again_not_dead_lettered(kafka: KafkaSettings, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The worker's intake path with Cassandra away (a key service on a closed port, so the real driver
    fails): the sealed record is not dead-lettered and poll raises nothing; once keys answer, it arrives."""
    from parley import keys
    from schemas import sealing

    kafka = replace(kafka, topic_prefix=f"{kafka.topic_prefix}keys-{uuid.uuid4().hex[:4]}.")
    client = admin(kafka)
    ensure_topics(kafka, client, [TOPICS["chat.tokens"]])
    producer = EventProducer(kafka)
    held = sealing.installed()
    sent = replace(_chunk(str(uuid.uuid4()), 0), user_id=f"u_{uuid.uuid4().hex[:12]}", text="sealed words")
    producer.produce_sync(sent, topic=kafka.topic("chat.tokens"))  # sealed under a new user's key
    consumer = EventConsumer(kafka, f"test-keys-{uuid.uuid4().hex[:6]}", ["chat.tokens"], producer)
    away = keys.KeyService(lambda: keys_on_a_closed_port(), keys.LocalKms(tmp_path / "kek.json"), "nowhere")
    try:
        sealing.install(away)
        delivered: list[Delivery] = []

        def met() -> int:  # the times poll met the record and put it back
            return sum(r.getMessage() == "record not readable yet; read again" for r in caplog.records)

        deadline = time.monotonic() + 60
        while met() < 3 and time.monotonic() < deadline:
            delivered += consumer.poll(timeout=0.5)
        assert met() >= 3, "the consumer never met the record"
        assert delivered == [] and consumer.dead_lettered == 0
        sealing.install(held)
        got = _drain(consumer, 1)
        assert [d.event for d in got] == [sent] and consumer.dead_lettered == 0

        # The same for a reader outside any group (memory, cancels): the batch is read again, not lost.
        plain = reader(kafka, "test-keys")
        plain.assign([TopicPartition(kafka.topic("chat.tokens"), p, OFFSET_BEGINNING) for p in range(TOPICS["chat.tokens"].partitions)])
        sealing.install(away)
        before = met()
        while met() < before + 3 and time.monotonic() < deadline + 60:
            assert read_events(plain, TokenChunk, 100, 0.5, "test") == ([], 0)
        sealing.install(held)
        found: list[TokenChunk] = []
        while not found and time.monotonic() < deadline + 90:
            found, _ = read_events(plain, TokenChunk, 100, 0.5, "test")
        plain.close()
        assert found == [sent]
    finally:
        sealing.install(held)
        away.close()
        consumer.close()
        producer.close()  # the topic is under the module's prefix: its fixture deletes it


def keys_on_a_closed_port():  # type: ignore[no-untyped-def]
    """A real driver connecting to a port nothing listens on: Cassandra away, as a client sees it."""
    import socket

    from parley.cassandra import connect
    from parley.settings import CassandraSettings, from_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return connect(replace(from_env(CassandraSettings), hosts="127.0.0.1", port=port), connect_timeout=1.0)


def test_a_record_of_a_newer_writer_is_read_through_the_schemas_topic(kafka: KafkaSettings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A rolling deploy: a writer one release ahead publishes its schemas, then writes; this
    (older) reader has no .avsc for that fingerprint and reads the record all the same."""
    import json

    from confluent_kafka import Producer

    from parley import schema_registry
    from schemas.events import MessagePosted
    from schemas.records import to_record

    future = json.loads((codec.AVRO_DIR / "MessagePosted.avsc").read_text())
    future["fields"].append({"name": "field_of_the_next_release", "type": "long", "default": 0})
    (tmp_path / "MessagePosted.avsc").write_text(json.dumps(future))
    assert schema_registry.publish(kafka, tmp_path) == 1

    cid = str(uuid.uuid4())
    event = MessagePosted(conversation_id=cid, user_id="u", message_id="m", parent_id=None, client_message_id="k", content="hi")
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(future, named_schemas={}), {**to_record(event), "field_of_the_next_release": 7})
    raw = Producer({"bootstrap.servers": kafka.bootstrap})
    raw.produce(kafka.topic("chat.events"), key=cid.encode(), value=codec.MAGIC + codec.fingerprint(future) + body.getvalue())
    assert raw.flush(30) == 0

    producer = EventProducer(kafka)
    codec.install_source(schema_registry.KafkaSchemaSource(kafka))
    consumer = EventConsumer(kafka, f"test-newer-{uuid.uuid4().hex[:6]}", ["chat.events"], producer)
    try:
        got = _drain(consumer, 1, mine=lambda d: d.event.conversation_id == cid)
        assert [d.event for d in got] == [event]
        assert consumer.dead_lettered == 0
    finally:
        codec.install_source(None)
        consumer.close()
        producer.close()


def test_a_schema_published_after_a_lookup_is_found_by_the_next(kafka: KafkaSettings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Lookups read on from where the last stopped (not the topic again from its start), and miss nothing
    published since."""
    import json

    from parley import schema_registry

    def future(field: str) -> dict:  # type: ignore[type-arg]
        schema = json.loads((codec.AVRO_DIR / "MessagePosted.avsc").read_text())
        schema["fields"].append({"name": field, "type": "long", "default": 0})
        return schema

    first, second = future(f"f_{uuid.uuid4().hex[:8]}"), future(f"g_{uuid.uuid4().hex[:8]}")
    (tmp_path / "MessagePosted.avsc").write_text(json.dumps(first))
    schema_registry.publish(kafka, tmp_path)
    source = schema_registry.KafkaSchemaSource(kafka)
    assert source.lookup(codec.fingerprint(first)) == first
    (tmp_path / "MessagePosted.avsc").write_text(json.dumps(second))
    schema_registry.publish(kafka, tmp_path)
    assert source.lookup(codec.fingerprint(second)) == second
    assert source.lookup(codec.fingerprint(first)) == first  # still held
