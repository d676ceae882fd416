"""The gateway's running experiments: read to the end before the first turn, then kept current by polls;
each turn's arm answered from the fold. A stand-in reader replaces Kafka."""

from __future__ import annotations

import threading

import pytest

from gateway import experiments as gx
from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.events import ExperimentArm, ExperimentStarted, ExperimentStopped
from streams.experiments import Running

STARTED = ExperimentStarted(experiment="e", arms=[ExperimentArm(name="a", share=0.5), ExperimentArm(name="b", share=0.5)], tiers=["free"])


class Reader:
    """ops.experiments as a list: ``to_end`` reads what is there; ``poll`` what was added since."""

    log: list = []
    failures = 0

    def __init__(self, kafka: KafkaSettings) -> None:
        if Reader.failures:
            Reader.failures -= 1
            raise BrokerUnavailable("no broker yet")
        self.running, self.read = Running(), 0

    def to_end(self, timeout_s: float) -> Running:
        return self._read()

    def poll(self, timeout: float = 0.5) -> int:
        before = self.read
        self._read()
        threading.Event().wait(0.01)  # as a real poll waits: no hot loop
        return self.read - before

    def _read(self) -> Running:
        self.running.apply_all(Reader.log[self.read:])
        self.read = len(Reader.log)
        return self.running

    def close(self) -> None:
        pass


@pytest.fixture
def book(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(gx, "ExperimentReader", Reader)
    monkeypatch.setattr(gx.time, "sleep", lambda s: None)
    Reader.log, Reader.failures = [STARTED], 2  # two failed starts first: the broker not up yet
    b = gx.Experiments(KafkaSettings())
    b.start()
    yield b
    b.close()


def _until(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        done.wait(0.01)
    pytest.fail("not reached in time")


def test_the_first_turns_see_what_was_running_and_later_starts_and_stops_arrive(book: gx.Experiments) -> None:
    assert book.wait_ready(5.0)
    arm = book.assignment("user-1", "free")
    assert arm is not None and arm.experiment == "e" and arm.arm in {"a", "b"}
    assert book.assignment("user-1", "plus") is None  # plus takes no part
    Reader.log.append(ExperimentStopped(experiment="e"))
    _until(lambda: book.assignment("user-1", "free") is None)


def test_not_ready_is_said_after_the_wait_and_turns_go_on_without_an_arm() -> None:
    b = gx.Experiments(KafkaSettings())  # never started: nothing is read
    assert b.wait_ready(0.01) is False and b.assignment("u", "free") is None
