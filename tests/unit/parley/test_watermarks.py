"""``watermarks`` asks again while the broker's answer is transient, and only then."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from parley.consumer import watermarks


class Answers:
    """Stands in for a consumer's ``get_watermark_offsets``: each call takes the next answer."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer))
        return answer  # type: ignore[return-value]


def test_a_leader_moving_is_asked_again() -> None:
    consumer = Answers(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, (3, 17))
    assert watermarks(consumer, TopicPartition("t", 0), 10) == (3, 17)  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_a_lasting_error_is_raised_at_once() -> None:
    consumer = Answers(KafkaError.TOPIC_AUTHORIZATION_FAILED, (0, 1))
    with pytest.raises(KafkaException) as raised:
        watermarks(consumer, TopicPartition("t", 0), 10)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consumer.calls == 1


def test_a_transient_error_past_the_deadline_is_raised() -> None:
    consumer = Answers(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 50)
    with pytest.raises(KafkaException):
        watermarks(consumer, TopicPartition("t", 0), 0.5)  # type: ignore[arg-type]
    assert 1 < consumer.calls < 50


class Offsets:
    """Stands in for an AdminClient's ``list_offsets``: each call's futures take the next answer (an error
    code, or a one-tuple offset)."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)

    def list_offsets(self, request: dict, request_timeout: float) -> dict:
        from concurrent.futures import Future
        from types import SimpleNamespace

        answer = self.answers.pop(0)
        out = {}
        for tp in request:
            fut: Future = Future()
            if isinstance(answer, int):
                fut.set_exception(KafkaException(KafkaError(answer)))
            else:
                fut.set_result(SimpleNamespace(offset=answer[0]))  # type: ignore[index]
            out[tp] = fut
        return out


def test_end_offsets_ask_again_while_the_answer_is_transient_and_only_then() -> None:
    from parley.errors import BrokerUnavailable
    from parley.ops import Ops
    from parley.settings import KafkaSettings

    ops = Ops(KafkaSettings(bootstrap="127.0.0.1:1"))
    ops._admin = Offsets(KafkaError.NOT_LEADER_FOR_PARTITION, (5,))  # type: ignore[assignment]
    assert ops.end_offsets([("t", 0)]) == {("t", 0): 5}
    ops._admin = Offsets(KafkaError.TOPIC_AUTHORIZATION_FAILED, (5,))  # type: ignore[assignment]
    with pytest.raises(BrokerUnavailable, match="reading end offsets failed"):
        ops.end_offsets([("t", 0)])
