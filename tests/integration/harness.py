"""Stream processors as faust worker subprocesses, and topics read from their beginning: what the
integration tests of the processors share."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from parley.settings import KafkaSettings
from schemas import codec
from schemas import events as ev
from schemas.catalog import TOPICS

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "You are a test assistant."
DEADLINE = 120.0


class Worker:
    """One processor as a faust worker subprocess; its log is kept for failure messages."""

    def __init__(self, name: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams", name, "worker", "-l", os.environ.get("PARLEY_TEST_FAUST_LOG", "warn")],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def worker_env(kafka: KafkaSettings, keyspace: str, group_prefix: str, datadir: Path) -> dict[str, str]:
    return os.environ | {
        "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
        "PARLEY_KEYSPACE": keyspace,
        "PARLEY_STREAMS_GROUP_PREFIX": group_prefix,
        "PARLEY_STREAMS_DATADIR": str(datadir),
        "PARLEY_CONTEXT_SYSTEM_PROMPT": SYSTEM,
        "PYTHONPATH": str(ROOT),
    }


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes


class Tail:
    """Everything on a topic from its beginning, read as it arrives."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.records: list[Record] = []
        self._c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"tail-{uuid.uuid4().hex[:8]}"})
        name = kafka.topic(topic)
        self._c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS[topic].partitions)])

    def events(self) -> list[tuple[int, ev.Event]]:
        return [(r.partition, codec.decode(r.value)) for r in self.records]

    def wait(self, done: Callable[[list[tuple[int, ev.Event]]], bool], what: str, workers: list[Worker]) -> None:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            for msg in self._c.consume(100, 0.5):
                if not msg.error():
                    self.records.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value()))
            if done(self.events()):
                return
            dead = [w for w in workers if w.proc.poll() is not None]
            assert not dead, "\n".join(f"{w.log.name} exited:\n{w.tail()}" for w in dead)
        logs = "\n".join(f"--- {w.log.name}\n{w.tail()}" for w in workers)
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    def close(self) -> None:
        self._c.close()
