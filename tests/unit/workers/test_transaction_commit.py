"""A commit that times out is retried to its end, never aborted (review of a chaos run: the coordinator
was completing it already, refused the abort as INVALID_TXN_STATE, and the worker stopped as fenced)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from parley.settings import KafkaSettings
from workers.transactions import TransactionalCommitter


class Group:
    def positions(self) -> dict[int, int]:
        return {0: 5}

    def group_metadata(self) -> Any:
        return object()


class SlowCoordinator:
    """librdkafka's transactional calls against a coordinator slow to finish a commit: ``timeouts`` commit calls
    time out first; an abort while a commit is under way is refused for good, as the broker does."""

    def __init__(self, timeouts: int, then: KafkaError | None = None) -> None:
        self.timeouts, self.then, self.calls = timeouts, then, []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def flush(self, timeout: float) -> int:
        return 0

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self.calls.append("offsets")

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if self.timeouts:
            self.timeouts -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True))
        if self.then is not None:
            raise KafkaException(self.then)

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        raise KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, "a commit is in progress", fatal=True))


def committer(producer: SlowCoordinator) -> TransactionalCommitter:
    c = TransactionalCommitter(KafkaSettings(bootstrap="127.0.0.1:1"), "t-1", "chat.inference.small", 1000)
    c._producer, c._group = producer, Group()  # type: ignore[assignment]
    return c


def test_a_commit_that_times_out_again_and_again_is_retried_until_it_ends_and_never_aborted() -> None:
    # More timeouts than one call's time (1 s here) holds: the old bound gave up and aborted.
    coordinator = SlowCoordinator(timeouts=15)
    committer(coordinator)._transact(())
    assert coordinator.calls == ["begin", "offsets", *["commit"] * 16]


def test_a_commit_that_needs_an_abort_is_aborted() -> None:
    needs_abort = KafkaError(KafkaError._TIMED_OUT, "abortable", retriable=True, txn_requires_abort=True)
    coordinator = SlowCoordinator(timeouts=0, then=needs_abort)
    with pytest.raises(Exception):
        committer(coordinator)._transact(())
    assert coordinator.calls[-1] == "abort"
