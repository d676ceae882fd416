"""A processor's commit never passes a record it still holds (streams/app.py ``_Consumer._new_offset``).

faust-streaming 0.15.3 commits past the head of a partition when the head is still being handled and the
records after it are acknowledged (faust-streaming issue #606): a record retried in place through an
outage, while other keys' lanes go on, was lost by the next kill (bench.chaos --tools, 6 tool results).
These run on the processors' own faust consumer, with faust's own messages.
"""

from __future__ import annotations

from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP, Message

from parley.settings import KafkaSettings
from streams.app import make_app

TOPIC = "chat.events"
TP0 = TP(TOPIC, 0)


def message(offset: int, tp: TP = TP0) -> Message:
    return Message(tp.topic, tp.partition, offset, 0.0, 0, None, b"k", b"v", None, tp=tp)


def read(consumer: FaustConsumer, *offsets: int, tp: TP = TP0) -> list[Message]:
    """Messages as a stream hands them to the agent: tracked as pending acknowledgement."""
    taken = [message(o, tp) for o in offsets]
    for m in taken:
        consumer.track_message(m)
    return taken


def consumer_committed_at(offset: int) -> FaustConsumer:
    app = make_app("probe", KafkaSettings())
    app.topics.acks_enabled_for = lambda topic: True  # type: ignore[method-assign]  # faust's own check reads the live subscription
    consumer = app.consumer
    consumer._committed_offset[TP0] = offset
    return consumer


def test_a_record_in_hand_at_the_head_holds_the_commit_until_it_is_acknowledged() -> None:
    consumer = consumer_committed_at(10)
    head, *rest = read(consumer, 10, 11, 12)
    for m in rest:
        consumer.ack(m)
    assert consumer._new_offset(TP0) is None  # faust alone: 13, and a kill loses offset 10
    consumer.ack(head)
    assert consumer._new_offset(TP0) == 13


def test_records_before_the_one_in_hand_are_committed_and_the_rest_wait() -> None:
    consumer = consumer_committed_at(10)
    taken = read(consumer, 10, 11, 12, 13, 14)
    for m in taken[:2] + taken[3:]:
        consumer.ack(m)
    assert consumer._new_offset(TP0) == 12  # up to the record in hand (12), not past it
    consumer._committed_offset[TP0] = 12  # as faust's commit records it
    consumer.ack(taken[2])
    assert consumer._new_offset(TP0) == 15


def test_a_record_in_hand_on_another_partition_does_not_hold_this_one() -> None:
    consumer = consumer_committed_at(10)
    read(consumer, 3, tp=TP(TOPIC, 1))
    for m in read(consumer, 10, 11):
        consumer.ack(m)
    assert consumer._new_offset(TP0) == 12
