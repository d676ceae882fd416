"""Stacks whose workers the test chooses (pools, ids, settings), and readers of their topics.

test_routing.py and test_scaling.py start their stacks with these; waits have generous deadlines
and never assert a timing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import Event, GenerationCompleted, InferenceRouted, WorkerHeartbeat
from tools import isolated
from tools.client import ParleyClient
from tools.supervisor import Child
from tools.topology import CONTEXT, GATEWAY, MATERIALIZER, ROUTER, Service

DEADLINE = 120.0
HEARTBEAT_S = 0.5
EXPIRY_S = 3.0
PROCESSORS = (CONTEXT, ROUTER, MATERIALIZER, GATEWAY)

#: Fast heartbeats and expiry: the fleet settles in seconds.
COMMON_ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_WORKER_HEARTBEAT_S": str(HEARTBEAT_S),
    "PARLEY_ROUTER_HEARTBEAT_EXPIRY_S": str(EXPIRY_S),
}


def read_all(kafka: KafkaSettings, topic: str, done: Callable[[list[Event]], bool], what: str) -> list[Event]:
    """Every event of ``topic`` from its beginning, read until ``done`` holds (or the deadline fails the test)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"e2e-routing-{uuid.uuid4().hex[:6]}"})
    name = kafka.topic(topic)
    consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS[topic].partitions)])
    events: list[Event] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while not done(events):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for msg in consumer.consume(200, 0.5):
                if not msg.error() and msg.value() is not None:
                    events.append(codec.decode(msg.value()))
        return events
    finally:
        consumer.close()


def wait_for_fleet(kafka: KafkaSettings, workers: dict[str, str]) -> None:
    """Until every worker (id → pool) beats owning partitions, and each pool's partitions are split among them."""

    def settled(events: list[Event]) -> bool:
        latest = {e.worker_id: e for e in events if isinstance(e, WorkerHeartbeat) and e.worker_id in workers}
        if set(latest) != set(workers) or not all(b.partitions for b in latest.values()):
            return False
        for pool in set(workers.values()):
            claims = [p for b in latest.values() if b.pool == pool for p in b.partitions]
            if sorted(claims) != list(range(TOPICS[f"chat.inference.{pool}"].partitions)):
                return False
        return True

    read_all(kafka, "fleet.heartbeats", settled, f"heartbeats of {sorted(workers)} after the rebalance")
    time.sleep(4 * HEARTBEAT_S)  # not an assertion: lets the router read the same beats


@dataclass
class RoutingStack:
    inner: isolated.IsolatedStack
    workers: dict[str, Child]

    def client(self, tier: str = "plus") -> ParleyClient:
        return ParleyClient(self.inner.url, self.inner.create_user(f"routing-{tier}", tier)[1])

    def routed(self, request_ids: set[str], pool: str = "small") -> dict[str, InferenceRouted]:
        events = read_all(
            self.inner.kafka,
            f"chat.inference.{pool}",
            lambda es: request_ids <= {e.request.request_id for e in es if isinstance(e, InferenceRouted)},
            f"InferenceRouted of {len(request_ids)} requests on {pool}",
        )
        return {e.request.request_id: e for e in events if isinstance(e, InferenceRouted) and e.request.request_id in request_ids}

    def completed(self, request_ids: set[str]) -> dict[str, GenerationCompleted]:
        events = read_all(
            self.inner.kafka,
            "chat.events",
            lambda es: request_ids <= {e.request_id for e in es if isinstance(e, GenerationCompleted)},
            f"GenerationCompleted of {len(request_ids)} requests",
        )
        return {e.request_id: e for e in events if isinstance(e, GenerationCompleted) and e.request_id in request_ids}


def start_stack(
    name: str, log_dir: Path, env: dict[str, str], workers: list[tuple[str, Service, dict[str, str]]]
) -> RoutingStack:
    """The processors and gateway of the topology, then one synthetic engine and one worker per ``workers`` entry."""
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), name)
    inner = isolated.start(kafka, cassandra, log_dir, env, services=PROCESSORS)
    children: dict[str, Child] = {}
    try:
        for worker_id, service, extra in workers:
            _, children[worker_id] = isolated.add_worker(inner, service, worker_id, extra)
        wait_for_fleet(kafka, {w: s.module_args[-1] for w, s, _ in workers})
    except BaseException:
        inner.stop()
        isolated.drop(kafka, cassandra)
        raise
    return RoutingStack(inner, children)


def stop_stack(stack: RoutingStack) -> None:
    stack.inner.stop()
    isolated.drop(stack.inner.kafka, stack.inner.cassandra)
