"""The router on the real Kafka: a router started afresh routes an attempt it is sent again where its
predecessor did; and admission sees the pool's backlog, turns in ``chat.inference.<pool>`` no worker took.

The context builder sends a turn again after its own restart, and faust
redelivers what a killed router had not committed: a second record of one
attempt. Routed to another partition, two workers would each generate it. The
new router here would place the conversation elsewhere (a worker's heartbeat
now names another partition; its predecessor had none and hashed), so only a
decision read back from the log sends the second record where the first went.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from parley.kafka import EventProducer
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas import events as ev
from schemas.catalog import TOPICS
from streams.route_backlog import BacklogReader
from streams.router import Router, policy_from
from streams.settings import RouterSettings
from tests.integration.harness import Tail, Worker, worker_env

POOL_PARTITIONS = TOPICS["chat.inference.small"].partitions


def request(cid: str, tier: str = "free") -> ev.InferenceRequested:
    return ev.InferenceRequested(
        conversation_id=cid,
        user_id="u",
        tier=tier,
        request_id=str(uuid.uuid4()),
        parent_id=str(uuid.uuid4()),
        messages=[ev.PromptMessage(role="user", content="hello")],
        prompt_tokens=5,
        requested_at=ev.now_us(),
    )


def conversation_not_on(partition: int) -> str:
    while True:
        cid = str(uuid.uuid4())
        if partition_for(cid, POOL_PARTITIONS) != partition:
            return cid


@pytest.fixture
def beating(kafka: KafkaSettings) -> Iterator[list[int]]:
    """A worker of the small pool beating every half second; set its partitions through the list."""
    partitions: list[int] = []
    stop = threading.Event()
    producer = EventProducer(kafka)

    def beat() -> None:
        while not stop.wait(0.5):
            if partitions:
                producer.produce_sync(ev.WorkerHeartbeat(worker_id="w-test", pool="small", partitions=list(partitions), max_running=8))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield partitions
    finally:
        stop.set()
        thread.join()
        producer.close()


def test_a_second_record_of_an_attempt_goes_where_the_first_went_across_a_router_restart(
    kafka: KafkaSettings, beating: list[int], tmp_path: Path
) -> None:
    env = worker_env(kafka, "unused", f"rr-{uuid.uuid4().hex[:6]}.", tmp_path / "faust") | {
        "PARLEY_ROUTER_POOLS": "small=test-small",
        "PARLEY_STREAMS_SESSION_TIMEOUT_S": "6",
    }
    producer = EventProducer(kafka)
    routed = Tail(kafka, "chat.inference.small")
    first_router = Worker("router", env, tmp_path / "router-1.log")
    routers = [first_router]
    try:
        cid = str(uuid.uuid4())
        first = request(cid)
        hashed = partition_for(cid, POOL_PARTITIONS)
        producer.produce_sync(first)
        routed.wait(lambda evs: any(e.request.request_id == first.request_id for _, e in evs), "the first route", routers)
        [(partition, decision)] = [(p, e) for p, e in routed.events() if e.request.request_id == first.request_id]
        assert partition == decision.partition == hashed  # no heartbeats: Kafka's hash

        first_router.stop()
        elsewhere = (hashed + 1) % POOL_PARTITIONS
        beating.append(elsewhere)
        beats = Tail(kafka, "fleet.heartbeats")
        try:
            beats.wait(lambda evs: bool(evs), "a worker's heartbeat", [])
        finally:
            beats.close()
        second_router = Worker("router", env, tmp_path / "router-2.log")
        routers = [second_router]
        # A router just started may route before it read the fleet: turns of new conversations (hashed
        # elsewhere) until one lands on the beating worker show this one has.
        while True:
            probe = request(conversation_not_on(elsewhere))
            producer.produce_sync(probe)
            routed.wait(lambda evs: any(e.request.request_id == probe.request_id for _, e in evs), "a probe", routers)
            if any(e.request.request_id == probe.request_id and p == elsewhere for p, e in routed.events()):
                break
            time.sleep(0.5)
        producer.produce_sync(first)  # sent again
        routed.wait(lambda evs: sum(e.request.request_id == first.request_id for _, e in evs) >= 2, "the second route", routers)
        # The next turn of the conversation shows where the new router places it by itself.
        newer = request(cid)
        producer.produce_sync(newer)
        wanted = {first.request_id, newer.request_id}
        routed.wait(lambda evs: any(e.request.request_id == newer.request_id for _, e in evs), "the next turn", routers)
        places = [(e.request.request_id, p) for p, e in routed.events() if e.request.request_id in wanted]
        assert places == [(first.request_id, hashed), (first.request_id, hashed), (newer.request_id, elsewhere)]
    finally:
        for r in routers:
            r.stop()
        routed.close()
        producer.close()


# ------------------------------------------------------------------ admission sees the backlog

#: A stuck worker of the small pool: it owns every partition and has 8 slots, but reads nothing (nor says
#: where it read to), so what is routed to the pool waits in Kafka, where only the backlog reading sees it.
def stuck() -> ev.WorkerHeartbeat:
    return ev.WorkerHeartbeat(worker_id="w-stuck", pool="small", partitions=list(range(POOL_PARTITIONS)), max_running=8)


def routed_elsewhere(n: int) -> list[ev.InferenceRouted]:
    """``n`` turns another router sent to the small pool."""
    return [
        ev.InferenceRouted(conversation_id=r.conversation_id, user_id="u", request=r, pool="small", model="test-small",
                           partition=partition_for(r.conversation_id, POOL_PARTITIONS), route_reason="classifier")
        for r in (request(str(uuid.uuid4())) for _ in range(n))
    ]


def took_everything(kafka: KafkaSettings) -> None:
    """The pool's group took every record so far (earlier tests' turns); from here on it reads nothing."""
    topic = kafka.topic("chat.inference.small")
    ends = BacklogReader(kafka, ["small"]).read()["small"].ends
    group = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": kafka.topic_prefix + "workers.small"})
    group.commit(offsets=[TopicPartition(topic, p, end) for p, end in ends.items()], asynchronous=False)
    group.close()


def test_the_load_estimate_grows_with_records_nobody_reads(kafka: KafkaSettings) -> None:
    took_everything(kafka)
    router = Router(policy_from(RouterSettings(pools="small=test-small", capabilities="small=chat")))
    router.heartbeat(stuck(), time.monotonic())
    reader = BacklogReader(kafka, ["small"])
    producer = EventProducer(kafka)
    try:
        router.backlog(router.backlog_mark(time.monotonic()), reader.read())
        before = router.loads(time.monotonic(), ["small"])["small"]
        assert (before.capacity, before.demand, before.waiting) == (8, 0, 0)
        for event in routed_elsewhere(12):
            producer.produce_sync(event)
        router.backlog(router.backlog_mark(time.monotonic()), reader.read())
        after = router.loads(time.monotonic(), ["small"])["small"]
        assert (after.demand, after.waiting) == (12, 12)
        # Before the next reading, this router's own turns count: a burst is seen at once.
        paid = router.route(request(str(uuid.uuid4()), tier="plus"), time.monotonic())
        assert isinstance(paid[0], ev.InferenceRouted)
        assert router.loads(time.monotonic(), ["small"])["small"].waiting == 13
        # 13 / 8 is past the free bound (1.25), within the paid one (2.0)
        completed, last = router.route(request(str(uuid.uuid4())), time.monotonic())
        assert isinstance(completed, ev.GenerationCompleted) and isinstance(last, ev.TokenChunk)
        assert (completed.finish_reason, completed.error_code, last.retry_after >= 10) == ("rejected", "overloaded", True)
        assert isinstance(router.route(request(str(uuid.uuid4()), tier="plus"), time.monotonic())[0], ev.InferenceRouted)
    finally:
        producer.close()


@pytest.fixture
def stuck_worker(kafka: KafkaSettings) -> Iterator[None]:
    """The stuck worker, beating every half second."""
    stop = threading.Event()
    producer = EventProducer(kafka)

    def beat() -> None:
        while not stop.wait(0.5):
            producer.produce_sync(stuck())

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        producer.close()


def test_a_router_sheds_free_turns_on_the_backlog_and_still_routes_paid_ones(
    kafka: KafkaSettings, stuck_worker: None, tmp_path: Path
) -> None:
    env = worker_env(kafka, "unused", f"rb-{uuid.uuid4().hex[:6]}.", tmp_path / "faust") | {
        "PARLEY_ROUTER_POOLS": "small=test-small",
        "PARLEY_ROUTER_CAPABILITIES": "small=chat",
        # 8 slots: free turns are shed from 10 waiting (1.25), paid ones beyond 32 (4.0): room for the
        # 11 below, the free turns a router routes before its first backlog reading (up to 5 on a busy
        # machine, each then waiting too) and the paid one
        "PARLEY_ROUTER_QUEUE_LIMIT": "1.25",
        "PARLEY_ROUTER_PAID_LIMIT": "4.0",
    }
    took_everything(kafka)
    producer = EventProducer(kafka)
    for event in routed_elsewhere(11):  # 11 waiting: past the free bound, within the paid one
        producer.produce_sync(event)
    routed, ends = Tail(kafka, "chat.inference.small"), Tail(kafka, "chat.tokens")
    router = Worker("router", env, tmp_path / "router.log")

    def outcome(request_id: str) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for tail in (routed, ends):
                tail.wait(lambda _: True, "a batch", [router])  # one poll
            if any(e.request.request_id == request_id for _, e in routed.events()):
                return "routed"
            if any(isinstance(e, ev.TokenChunk) and e.request_id == request_id for _, e in ends.events()):
                return "ended"
        raise AssertionError(f"no outcome for a turn\n{router.tail()}")

    try:
        # A router just started admits everything until it has read the fleet and the backlog: free turns
        # until one is shed (each one routed meanwhile waits in the backlog too, within the paid share's room).
        for _ in range(5):
            free = request(str(uuid.uuid4()))
            producer.produce_sync(free)
            if (seen := outcome(free.request_id)) == "ended":
                break
            time.sleep(1.0)
        assert seen == "ended", "no free turn was shed: the router does not count the backlog"
        [last] = [e for _, e in ends.events() if isinstance(e, ev.TokenChunk) and e.request_id == free.request_id]
        assert (last.finish_reason, last.error_code, last.retry_after >= 10) == ("rejected", "overloaded", True)

        paid = request(str(uuid.uuid4()), tier="plus")
        producer.produce_sync(paid)
        assert outcome(paid.request_id) == "routed"
    finally:
        router.stop()
        routed.close()
        ends.close()
        producer.close()
