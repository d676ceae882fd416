"""A replicated cluster of this module's own (``PARLEY_INFRA_REPLICAS=3``: three KRaft brokers and three
Cassandra nodes on loopback addresses of their own): what RF 3 survives and what it does not.

With one broker and one Cassandra node killed, an acks=all produce and a LOCAL_QUORUM write and read
still succeed; with two of each killed, both fail with an error (a produce at its delivery timeout,
CQL at the coordinator's), never hang. The cluster is started, killed and deleted here, apart from the
shared single-node infra and from a developer's `parley infra up --replicas 3` (other addresses, ports).
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from cassandra import ConsistencyLevel
from confluent_kafka.admin import ConfigResource

from infra.local import faults, secure, stack
from infra.local.settings import LocalInfraSettings
from parley.cassandra import AsyncCql, connect
from parley.errors import StoreUnavailable
from parley.kafka import EventProducer, ProduceFailed, admin
from parley.migrate import migrate
from parley.settings import REPO_ROOT, CassandraSettings, KafkaSettings, from_env
from parley.topics import ensure_topics
from schemas.catalog import TOPICS
from schemas.events import GenerationCancelRequested
from tools.supervisor import free_ports

# Six JVMs on two shared cores: a minute or two to start, in the first test's time (pytest-timeout counts
# the fixtures a test sets up); the default 300 s is for tests that start nothing.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = TOPICS["chat.control"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalInfraSettings]:
    kafka_port, controller_port, cassandra_port, storage_port = free_ports(4)
    cfg = replace(
        from_env(LocalInfraSettings),
        data_dir=REPO_ROOT / ".data" / "replication-test",
        replicas=3,
        replica_address="127.0.1.2",
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        cassandra_port=cassandra_port,
        cassandra_storage_port=storage_port,
    )
    stack.down(cfg, echo=lambda s: None)  # what a run that was killed left
    shutil.rmtree(cfg.data_dir, ignore_errors=True)
    try:
        stack.up(cfg, echo=lambda s: None)
        yield cfg
    finally:
        for name in ("kafka", "cassandra"):  # SIGKILL: a broker short of its quorum would not stop cleanly for 30 s
            for index in range(cfg.replicas):
                if faults.pid(cfg, name, index) is not None:
                    faults.kill(cfg, name, index)
        shutil.rmtree(cfg.data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def clients(cluster: LocalInfraSettings, tmp_path_factory: pytest.TempPathFactory) -> tuple[KafkaSettings, CassandraSettings]:
    """The cluster's client settings (RF 3), one catalog topic made by `parley topics`' code, and a
    keyspace made by `parley db migrate`'s with one table."""
    kafka, cassandra = secure.client_settings(cluster)
    kafka = replace(kafka, topic_prefix=f"repl-{uuid.uuid4().hex[:6]}.")
    cassandra = replace(cassandra, keyspace=f"repl_{uuid.uuid4().hex[:6]}")
    # The controller acknowledges before every broker shows the topic and its configs; on a busy machine
    # a verification may run first. ensure_topics is idempotent (it sets drifted configs back): asked again.
    deadline = time.monotonic() + 90
    while True:
        reports = ensure_topics(kafka, admin(kafka), [TOPIC])
        if all(r.ok for r in reports):
            break
        assert time.monotonic() < deadline, [(r.name, r.problems) for r in reports]
        time.sleep(2)
    cql = tmp_path_factory.mktemp("cql")
    (cql / "0001_probe.cql").write_text("CREATE TABLE IF NOT EXISTS probe (k text PRIMARY KEY, v text);\n")
    session = connect(cassandra)
    try:
        migrate(session, cassandra.keyspace, cassandra.replication, cql)
    finally:
        session.cluster.shutdown()
    return kafka, cassandra


def _cancel(n: int) -> GenerationCancelRequested:
    return GenerationCancelRequested(conversation_id=str(uuid.uuid4()), user_id="u", request_id=f"r{n}", reason="user")


async def _write_then_read(cql: AsyncCql, key: str) -> str:
    await cql.run("INSERT INTO {ks}.probe (k, v) VALUES (?, ?)", (key, f"value of {key}"))
    [row] = await cql.run("SELECT v FROM {ks}.probe WHERE k = ?", (key,))
    return row.v


def test_topics_and_keyspaces_are_made_with_three_replicas(clients: tuple[KafkaSettings, CassandraSettings]) -> None:
    kafka, cassandra = clients
    client = admin(kafka)
    partitions = client.list_topics(timeout=10).topics[kafka.topic(TOPIC.name)].partitions.values()
    assert {len(p.replicas) for p in partitions} == {3}
    [configs] = [f.result() for f in client.describe_configs([ConfigResource("topic", kafka.topic(TOPIC.name))]).values()]
    assert configs["min.insync.replicas"].value == "2"
    session = connect(cassandra)
    try:
        row = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (cassandra.keyspace,)
        ).one()
        assert row.replication["datacenter1"] == "3"
        # Every statement that does not say otherwise: a quorum of the replicas, Paxos in the local DC.
        profile = session.cluster.profile_manager.default
        assert (profile.consistency_level, profile.serial_consistency_level) == (
            ConsistencyLevel.LOCAL_QUORUM,
            ConsistencyLevel.LOCAL_SERIAL,
        )
    finally:
        session.cluster.shutdown()


async def test_one_node_of_each_down_is_survived_two_are_not(
    cluster: LocalInfraSettings, clients: tuple[KafkaSettings, CassandraSettings]
) -> None:
    kafka, cassandra = clients
    cql = AsyncCql(cassandra)
    producer = EventProducer(kafka)
    try:
        assert await _write_then_read(cql, "all up") == "value of all up"

        faults.kill(cluster, "kafka", 1)
        faults.kill(cluster, "cassandra", 1)
        for n in range(6):  # every partition: some were led by the broker that is gone
            await producer.send(_cancel(n), partition=n)
        assert await _write_then_read(cql, "one down") == "value of one down"
        [row] = await cql.run("SELECT v FROM {ks}.probe WHERE k = ?", ("all up",))  # written with all three up
        assert row.v == "value of all up"

        faults.kill(cluster, "kafka", 2)
        faults.kill(cluster, "cassandra", 2)
        # One broker of three: below min.insync.replicas (and the controllers' quorum), so no partition
        # takes an acks=all write; the producer says so at its delivery timeout (here 10 s, not 120 s).
        impatient = EventProducer(kafka, **{"delivery.timeout.ms": 10_000})
        try:
            with pytest.raises(ProduceFailed, match="chat.control"):
                await impatient.send(_cancel(9), partition=0)
        finally:
            impatient.close(timeout=1)
        with pytest.raises(StoreUnavailable, match="LOCAL_QUORUM"):
            await cql.run("INSERT INTO {ks}.probe (k, v) VALUES (?, ?)", ("two down", "lost"))
        with pytest.raises(StoreUnavailable, match="LOCAL_QUORUM"):
            await cql.run("SELECT v FROM {ks}.probe WHERE k = ?", ("all up",))
    finally:
        producer.close(timeout=1)
        cql.close()


def test_a_node_index_outside_the_cluster_is_refused(cluster: LocalInfraSettings) -> None:
    with pytest.raises(ValueError, match="0..2"):
        faults.kill(cluster, "kafka", 3)
    with pytest.raises(ValueError, match="kafka or cassandra"):
        faults.pause(cluster, "zookeeper", 0)
