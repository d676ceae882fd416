"""A worker cut off from the broker while closing a reply comes back after another worker resumed
the reply: its finished attempt must never land as a second completion (workers/transactions.py).

A private Kafka of this module has a second listener, and one of the two workers ("w-zombie")
reaches the broker only through a proxy in front of it (tests/e2e/kafka_proxy.py). The proxy
cuts that worker off at the moment it sends its reply's GenerationCompleted: the request is held,
unacknowledged, in the worker's producer. Its consumer-group session expires, the other worker
takes the partition over, finds no completion and resumes the reply as attempt 1. Then the proxy
lets the cut-off worker talk again, with its attempt 0 still in flight. Before the transactions
this test saw that attempt land: two completions for one reply. Now its transaction is refused
(stale generation, or timed out by the coordinator) and aborted; readers never see it.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from infra.local import stack as local_stack
from infra.local.settings import LocalInfraSettings
from parley.consumer import read_until, watermarks
from parley.settings import REPO_ROOT, CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import GenerationCompleted
from tests.e2e.fleet import COMMON_ENV, PROCESSORS, RoutingStack, wait_for_fleet
from tests.e2e.kafka_proxy import KafkaProxy
from tests.e2e.test_worker_crash import assert_resumed_once, serving_worker, stored_reply
from tools import isolated
from tools.client import Reply
from tools.topology import WORKER_SMALL

ZOMBIE = "w-zombie"
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def zombie_stack(infra, tmp_path_factory) -> Iterator[tuple[RoutingStack, KafkaProxy]]:
    ports = set()
    while len(ports) < 4:
        ports.add(isolated.free_port())
    kafka_port, controller_port, side_port, proxy_port = sorted(ports)
    cfg = replace(
        from_env(LocalInfraSettings),
        data_dir=REPO_ROOT / ".data" / f"zombie-{uuid.uuid4().hex[:8]}",
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        kafka_side_port=side_port,
        kafka_side_advertised_port=proxy_port,
    )
    proxy = KafkaProxy(proxy_port, side_port)
    proxy.start()
    env = {
        **COMMON_ENV,
        "PARLEY_ENGINE_TTFT_MS": "50",
        "PARLEY_ENGINE_TOKENS_PER_S": "4",
        "PARLEY_CONTEXT_MAX_TOKENS": "80",  # twenty seconds a reply: it ends long after the takeover
        "PARLEY_ROUTER_POOLS": "small=test-small",
        "PARLEY_WORKER_SESSION_TIMEOUT_MS": "6000",
    }
    inner = None
    try:
        local_stack.up(cfg, echo=lambda s: None, only=("kafka",))
        kafka = replace(from_env(KafkaSettings), bootstrap=f"127.0.0.1:{kafka_port}")
        kafka, cassandra = isolated.prepare(kafka, from_env(CassandraSettings), "zombie")
        inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("zombie-logs"), env, services=PROCESSORS)
        workers = {}
        _, workers["w-plain"] = isolated.add_worker(inner, WORKER_SMALL, "w-plain", {})
        _, workers[ZOMBIE] = isolated.add_worker(
            inner, WORKER_SMALL, ZOMBIE, {"PARLEY_KAFKA_BOOTSTRAP": f"127.0.0.1:{proxy_port}"}
        )
        wait_for_fleet(kafka, {"w-plain": "small", ZOMBIE: "small"})
        assert proxy.connections > 0, "the zombie-to-be reaches Kafka through the proxy"
        yield RoutingStack(inner, workers), proxy
    finally:
        if inner is not None:
            inner.stop()
            isolated.drop(inner.kafka, inner.cassandra)
        local_stack.down(cfg, echo=lambda s: None)
        proxy.stop()
        shutil.rmtree(cfg.data_dir, ignore_errors=True)


def completions_of(kafka: KafkaSettings, reply_id: str, isolation: str) -> list[GenerationCompleted]:
    """Every GenerationCompleted of the reply on chat.events, read as ``isolation`` (read_committed:
    what every Parley reader sees; read_uncommitted: aborted transactions too)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"e2e-{uuid.uuid4().hex[:6]}", "isolation.level": isolation})
    name = kafka.topic("chat.events")
    parts = [TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS["chat.events"].partitions)]
    marks = {tp.partition: watermarks(consumer, tp, 10) for tp in parts}
    consumer.assign(parts)
    found: list[GenerationCompleted] = []
    try:
        for msg in read_until(consumer, {(name, p): high for p, (low, high) in marks.items() if high > low}, 60):
            event = codec.decode(msg.value())
            if isinstance(event, GenerationCompleted) and event.request_id == reply_id:
                found.append(event)
        return found
    finally:
        consumer.close()


async def wait_for_log(stack: RoutingStack, worker: str, since: int, *needles: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not any(n in stack.workers[worker].log.read_text()[since:] for n in needles):
        assert time.monotonic() < deadline, f"{worker} never logged any of {needles}"
        assert stack.workers[worker].process.poll() is None, f"{worker} exited"
        await asyncio.sleep(0.5)


async def test_a_worker_cut_off_while_closing_a_reply_cannot_land_it_after_another_worker_resumed_it(
    zombie_stack: tuple[RoutingStack, KafkaProxy],
) -> None:
    stack, proxy = zombie_stack
    client = stack.client()
    try:
        for attempt in range(12):  # the router picks the worker: ask until a reply lands on the zombie-to-be
            cid = await client.create_conversation(f"zombie {attempt}")
            reply, served_by = Reply(), None
            async for event in client.stream_message(cid, "Tell me a long story about event sourcing."):
                reply.events.append(event)
                if served_by is None and event.event == "delta":
                    served_by = await asyncio.to_thread(serving_worker, stack, reply.head["reply_id"])
                    if served_by != ZOMBIE:
                        break  # the other worker finishes it on its own
                    cut_at = len(stack.workers[ZOMBIE].log.read_text())
                    proxy.cut_at_produce_to(stack.inner.kafka.topic("chat.events"))
            if served_by == ZOMBIE:
                break
        assert served_by == ZOMBIE, "no reply was routed to the worker behind the proxy"
        assert proxy.tripped.is_set(), "the worker was cut off as it closed its reply"

        # The other worker resumed it (attempt 1) and the client reads what is stored.
        stored, assistants = await stored_reply(client, cid, reply.head["reply_id"])
        assert_resumed_once(stack, reply, stored, assistants)
        await wait_for_log(stack, ZOMBIE, cut_at, "partitions lost")
        proxy.release()  # its attempt 0 is still in flight: it goes to the broker now

        reply_id = reply.head["reply_id"]

        def settled() -> list[GenerationCompleted]:
            """The committed completions once the woken worker's attempt landed or was aborted."""
            deadline = time.monotonic() + DEADLINE_S
            while True:
                committed = completions_of(stack.inner.kafka, reply_id, "read_committed")
                tried = "transaction aborted" in stack.workers[ZOMBIE].log.read_text()[cut_at:]
                if tried or len(committed) > 1 or time.monotonic() > deadline:
                    return committed
                time.sleep(0.5)

        committed = await asyncio.to_thread(settled)
        assert [c.attempt for c in committed] == [1], "one completion: the resumed attempt's"
        assert committed[0].content == reply.text
        stored, assistants = await stored_reply(client, cid, reply_id)
        assert stored["content"] == reply.text and len(assistants) == 1
        assert stack.workers[ZOMBIE].process.poll() is None, "the woken worker carries on"
    finally:
        proxy.release()
        await client.close()
