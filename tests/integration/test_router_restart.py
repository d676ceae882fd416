"""A router started afresh routes an attempt it is sent again where its predecessor did, on the real Kafka.

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

from parley.kafka import EventProducer
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas import events as ev
from schemas.catalog import TOPICS
from tests.integration.harness import Tail, Worker, worker_env

POOL_PARTITIONS = TOPICS["chat.inference.small"].partitions


def request(cid: str) -> ev.InferenceRequested:
    return ev.InferenceRequested(
        conversation_id=cid,
        user_id="u",
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
