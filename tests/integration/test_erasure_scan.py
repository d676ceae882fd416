"""The erasure scanner against files the real Kafka and Cassandra wrote: it finds a canary they stored,
decoded from their compressed formats, and does not find a string no one wrote.

Kafka: the shared broker, a topic of this test only (deleted after), a record produced the way every
Parley producer does (``parley.kafka.producer_config``: lz4). Cassandra: a node of this module only
(its own ports and data dir, stopped and deleted after), because the proof needs a flush, and a flush
goes through nodetool over JMX (``infra.local.nodetool``): the shared node is left alone. Starting it
costs about 20-40 s on a two-core machine.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from infra.local import cassandra as local_cassandra
from infra.local import jvm, nodetool
from infra.local import stack as local_stack
from infra.local.settings import LocalInfraSettings
from parley.cassandra import connect
from parley.kafka import admin, producer_config
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.erasure_scan import scan

pytestmark = pytest.mark.integration

#: Text the codecs shrink, so the producer really sends its batch lz4-compressed (librdkafka sends
#: a batch uncompressed when compression does not pay) and Cassandra's chunk really is LZ4.
FILLER = "Every message lives forever on the log unless its key is destroyed. " * 30


def canary() -> str:
    return f"erasure-canary-{uuid.uuid4().hex}"


def test_a_record_produced_with_lz4_is_found_in_the_kafka_segment(infra: LocalInfraSettings) -> None:
    settings = from_env(KafkaSettings)
    topic = f"audit-probe-{uuid.uuid4().hex[:12]}"
    client = admin(settings)
    for fut in client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        fut.result(timeout=30)
    try:
        secret, never = canary(), canary()
        producer = Producer(producer_config(settings))
        producer.produce(topic, key=b"u-1", value=f"{FILLER}{secret}{FILLER}".encode())
        assert producer.flush(30) == 0
        folder = infra.data_dir / "kafka" / "data" / f"{topic}-0"
        report = scan(infra.data_dir, [secret.encode(), never.encode()])
        ours = [f for f in report.findings if f.path.parent == folder]
        assert [(f.store, f.needle) for f in ours] == [("kafka", 0)], report.findings
        assert ours[0].where.startswith("value of record 0 of lz4 batch at 0"), ours[0].where
        assert not [f for f in report.findings if f.needle == 1]
        assert report.scanned["kafka"] > 0
        assert not [(p, why) for p, why in report.unscannable if p.parent == folder]
    finally:
        for fut in client.delete_topics([topic], operation_timeout=30).values():
            fut.result(timeout=60)


def _ports() -> tuple[int, int]:
    """A free native port and a free storage port whose JMX port (storage + 199) is free too."""
    while True:
        native, storage = isolated.free_port(), isolated.free_port()
        if native != storage and not jvm.port_taken(storage + 199) and storage + 199 != native:
            return native, storage


@pytest.fixture(scope="module")
def own_cassandra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalInfraSettings]:
    """A Cassandra of this module only, with JMX: flushed, scanned, stopped and deleted."""
    native, storage = _ports()
    cfg = replace(
        from_env(LocalInfraSettings),
        data_dir=tmp_path_factory.mktemp("erasure-cassandra"),
        cassandra_port=native,
        cassandra_storage_port=storage,
        cassandra_heap="512m",
    )
    try:
        local_stack.up(cfg, echo=lambda s: None, only=("cassandra",))
        yield cfg
    finally:
        jvm.stop(local_cassandra.service(cfg))
        shutil.rmtree(cfg.data_dir, ignore_errors=True)


def _table_dir(data_dir: Path, keyspace: str) -> Path:
    [folder] = (data_dir / "cassandra" / "data" / "data" / keyspace).glob("notes-*")
    return folder


def test_a_row_is_found_in_its_sstable_after_a_flush(own_cassandra: LocalInfraSettings) -> None:
    cfg = own_cassandra
    keyspace = f"audit_{uuid.uuid4().hex[:8]}"
    session = connect(replace(from_env(CassandraSettings), port=cfg.cassandra_port))
    try:
        session.execute(
            f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        )
        session.execute(f"CREATE TABLE {keyspace}.notes (id text PRIMARY KEY, body text)")
        secret, never = canary(), canary()
        session.execute(f"INSERT INTO {keyspace}.notes (id, body) VALUES (%s, %s)", ("n1", f"{FILLER}{secret}{FILLER}"))
    finally:
        session.cluster.shutdown()
    table = _table_dir(cfg.data_dir, keyspace)
    assert not list(table.glob("*-Data.db"))  # only in the memtable (and the commit log) so far

    began = time.monotonic()
    nodetool.flush(cfg, keyspace)
    flushed_s = time.monotonic() - began
    assert list(table.glob("*-Data.db")), f"no SSTable after a flush of {flushed_s:.1f}s"

    report = scan(cfg.data_dir, [secret.encode(), never.encode()])
    in_sstables = [f for f in report.findings if f.path.name.endswith("-Data.db")]
    assert [(f.store, f.needle, f.path.parent) for f in in_sstables] == [("cassandra", 0, table)], report.findings
    assert in_sstables[0].where.startswith("chunk 0, uncompressed offset ")
    assert {f.store for f in report.findings} == {"cassandra"}  # the commit log has it too, as it is
    assert not [f for f in report.findings if f.needle == 1]
    # Only the table's own files: a compaction of system tables may delete one while the scan runs.
    assert not [(p, why) for p, why in report.unscannable if p.parent == table]


def test_a_node_started_without_jmx_is_flushed_through_the_jdks_agent(own_cassandra: LocalInfraSettings) -> None:
    # The same node seen through settings whose JMX port it never opened: as a node started before
    # the JMX option was added looks. nodetool finds no JMX there and opens it with jcmd.
    free = next(p for p in range(own_cassandra.cassandra_storage_port + 1, 65000) if not jvm.port_taken(p + 199))
    cfg = replace(own_cassandra, cassandra_storage_port=free)
    nodetool.flush(cfg, "system")
    assert jvm.port_taken(local_cassandra.jmx_port(cfg))
