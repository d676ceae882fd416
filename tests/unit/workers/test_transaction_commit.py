"""A commit that times out is retried to its end, never aborted (review of a chaos run: the coordinator
was completing it already, refused the abort as INVALID_TXN_STATE, and the worker stopped as fenced)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from parley.settings import KafkaSettings
from parley.errors import Fenced
from workers.transactions import Aborted, TransactionalCommitter


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


class HungCoordinator(SlowCoordinator):
    """AddOffsetsToTxn times out while the coordinator's broker is paused; the abort that follows is refused
    for good (INVALID_TXN_STATE, fatal), as bench.chaos --replicas 3 saw."""

    def __init__(self, offsets_error: KafkaError, abort_error: KafkaError) -> None:
        super().__init__(timeouts=0)
        self.offsets_error, self.abort_error = offsets_error, abort_error

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self.calls.append("offsets")
        raise KafkaException(self.offsets_error)

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        raise KafkaException(self.abort_error)


TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "AddOffsetsToTxn timed out", txn_requires_abort=True)


def test_a_fatal_refusal_before_the_commit_replaces_the_producer_rather_than_stopping_the_worker() -> None:
    refused = KafkaError(KafkaError.INVALID_TXN_STATE, "invalid state", fatal=True)
    coordinator = HungCoordinator(TIMED_OUT, refused)
    with pytest.raises(Aborted) as caught:
        committer(coordinator)._transact(())
    assert caught.value.cut_off  # the producer is replaced and the batch tried again
    assert not isinstance(caught.value, Fenced) and coordinator.calls == ["begin", "offsets", "abort"]


def test_a_fatal_send_of_the_offsets_also_replaces_the_producer() -> None:
    coordinator = HungCoordinator(KafkaError(KafkaError.INVALID_TXN_STATE, "invalid state", fatal=True), TIMED_OUT)
    with pytest.raises(Aborted) as caught:
        committer(coordinator)._transact(())
    assert caught.value.cut_off and coordinator.calls == ["begin", "offsets"]


@pytest.mark.parametrize("code", [KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED])
def test_a_fence_after_a_timed_out_transaction_replaces_the_producer_once_and_then_stops_the_worker(code: int) -> None:
    """The coordinator aborts a transaction past its timeout and bumps the epoch (a broker killed mid-transaction,
    bench.chaos seed 51): librdkafka says fenced, as for a twin. The first time the producer is replaced; fenced
    again within FENCE_WINDOW_S, another instance holds the id, and the worker stops."""
    c = committer(HungCoordinator(TIMED_OUT, KafkaError(code, "fenced", fatal=True)))
    with pytest.raises(Aborted) as first:
        c._transact(())
    assert first.value.cut_off and not isinstance(first.value, Fenced)
    with pytest.raises(Fenced):
        c._transact(())


def test_a_fence_without_a_timeout_stops_the_worker_at_once() -> None:
    needs_abort = KafkaError(KafkaError.INVALID_TXN_STATE, "abortable", txn_requires_abort=True)
    with pytest.raises(Fenced):
        committer(HungCoordinator(needs_abort, KafkaError(KafkaError.PRODUCER_FENCED, "fenced", fatal=True)))._transact(())


def test_a_fatal_error_once_the_commit_was_asked_for_stops_the_worker() -> None:
    # It may have committed: only the group's committed offsets can say, so a new owner decides.
    coordinator = SlowCoordinator(timeouts=0, then=KafkaError(KafkaError.INVALID_TXN_STATE, "invalid state", fatal=True))
    with pytest.raises(Fenced):
        committer(coordinator)._transact(())
