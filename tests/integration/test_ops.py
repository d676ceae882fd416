"""`parley ops` against the real broker: lag and membership of a live consumer group."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition

from parley.kafka import EventProducer
from parley.ops import OffsetReader, Ops
from parley.settings import KafkaSettings
from schemas.events import ConversationCreated


def test_lag_and_groups_show_what_a_group_has_done_and_who_owns_what(kafka: KafkaSettings) -> None:
    producer = EventProducer(kafka)
    topic = kafka.topic("chat.events")
    for _ in range(5):
        producer.produce_sync(ConversationCreated(conversation_id=str(uuid.uuid4()), user_id="u"), partition=0)
    producer.close()

    group = f"ops-test-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    try:
        while seen < 2:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error() and msg.partition() == 0:
                seen += 1
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)

        ops = Ops(kafka)
        rows = {(r.topic, r.partition): r for r in ops.lag([group])}
        assert rows[(topic, 0)].committed == 2
        assert rows[(topic, 0)].end == 5
        assert rows[(topic, 0)].lag == 3

        # What long-lived processes ask with (the consumer protocol, never the admin API's group requests):
        # the same answer where the group committed, and asking joins nothing.
        offsets = OffsetReader(kafka)
        try:
            mine = {(r.topic, r.partition): r for r in offsets.lag([group])}
            assert set(mine) == {(topic, 0)}
            assert (mine[(topic, 0)].committed, mine[(topic, 0)].end, mine[(topic, 0)].lag) == (2, 5, 3)
        finally:
            offsets.close()

        (described,) = ops.groups([group])
        assert described.state == "stable"
        (member,) = described.members
        assert (topic, 0) in member.partitions
        assert len(member.partitions) == 12  # the lone member owns every partition of chat.events
    finally:
        consumer.close()
    (after,) = Ops(kafka).groups([group])
    assert after.members == () and after.state == "empty"
