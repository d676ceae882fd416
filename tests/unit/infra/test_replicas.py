"""infra/local's replicated cluster without starting a JVM: where each node listens, the configs that make
it one cluster with RF 3, and the settings clients get (tests/integration/test_replication.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.local import cassandra, kafka, secure, stack
from infra.local.settings import LocalInfraSettings
from parley.errors import ConfigError
from parley.settings import KafkaSettings
from parley.topics import min_insync_replicas, replication_factor, topic_configs
from schemas.catalog import TOPICS


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def _cluster(tmp_path: Path, **kw: object) -> LocalInfraSettings:
    return LocalInfraSettings(data_dir=tmp_path, replicas=3, **kw)  # type: ignore[arg-type]


def test_a_cluster_has_one_loopback_address_and_home_per_node(tmp_path: Path) -> None:
    cfg = _cluster(tmp_path)
    assert cfg.hosts == ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    assert [kafka.service(cfg, i).home for i in range(3)] == [tmp_path / "replicated" / f"kafka-{i}" for i in range(3)]
    assert {cassandra.service(cfg, i).host for i in range(3)} == set(cfg.hosts)
    # JMX listens on 127.0.0.1 whatever the node's address: one port each, none the single node's 7199.
    jmx = [cassandra.service(cfg, i).loopback_ports for i in range(3)]
    assert jmx == [(7200,), (7201,), (7202,)]
    single = LocalInfraSettings(data_dir=tmp_path)
    assert single.hosts == ("127.0.0.1",) and kafka.service(single).home == tmp_path / "kafka"
    assert cassandra.service(single).ports == (9042, 7000) and cassandra.service(single).loopback_ports == (7199,)


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"replicas": 0}, "PARLEY_INFRA_REPLICAS"),
        ({"replicas": 10}, "PARLEY_INFRA_REPLICAS"),
        ({"replicas": 3, "replica_address": "10.0.0.2"}, "PARLEY_INFRA_REPLICA_ADDRESS"),
        ({"replicas": 3, "replica_address": "127.255.255.254"}, "PARLEY_INFRA_REPLICA_ADDRESS"),
        ({"replicas": 3, "replica_address": "127.0.0.1"}, "PARLEY_INFRA_REPLICA_ADDRESS"),
        ({"replicas": 3, "secure": True}, "PARLEY_INFRA_SECURE"),
        ({"replicas": 3, "kafka_side_port": 19000}, "PARLEY_KAFKA_SIDE_PORT"),
    ],
)
def test_what_a_cluster_cannot_be_is_refused_by_name(tmp_path: Path, kw: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        LocalInfraSettings(data_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_the_brokers_form_one_quorum_with_replicated_internal_topics(tmp_path: Path) -> None:
    cfg = _cluster(tmp_path)
    nodes = [_props(kafka.server_properties(cfg, tmp_path, i)) for i in range(3)]
    assert [n["node.id"] for n in nodes] == ["0", "1", "2"]
    assert {n["controller.quorum.voters"] for n in nodes} == {"0@127.0.0.2:9093,1@127.0.0.3:9093,2@127.0.0.4:9093"}
    assert nodes[1]["listeners"] == "PLAINTEXT://127.0.0.3:9092,CONTROLLER://127.0.0.3:9093"
    assert nodes[1]["advertised.listeners"] == "PLAINTEXT://127.0.0.3:9092"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor", "default.replication.factor"):
        assert nodes[0][key] == "3"
    assert nodes[0]["min.insync.replicas"] == nodes[0]["transaction.state.log.min.isr"] == "2"


def test_the_single_broker_keeps_its_one_node_config(tmp_path: Path) -> None:
    props = _props(kafka.server_properties(LocalInfraSettings(data_dir=tmp_path), tmp_path))
    assert props["node.id"] == "1" and props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["offsets.topic.replication.factor"] == props["min.insync.replicas"] == "1"
    assert "broker.session.timeout.ms" not in props


def test_the_cassandra_nodes_are_one_ring_of_even_tokens(tmp_path: Path) -> None:
    cfg = _cluster(tmp_path)
    yamls = [cassandra.cassandra_yaml(cfg, i) for i in range(3)]
    assert all('seeds: "127.0.0.2:7000,127.0.0.3:7000,127.0.0.4:7000"' in y for y in yamls)
    assert [y.count(f"listen_address: {h}\nrpc_address: {h}\n") for y, h in zip(yamls, cfg.hosts)] == [1, 1, 1]
    tokens = [cassandra.initial_token(cfg, i) for i in range(3)]
    assert len(set(tokens)) == 3 and all(-(2**63) <= t < 2**63 for t in tokens)
    assert tokens[1] - tokens[0] == tokens[2] - tokens[1]
    assert "commitlog_sync: group" in yamls[0]  # an acknowledged write outlives a SIGKILL
    assert all("-Dcassandra.unsafesystem=true" not in cassandra.service(cfg, i).jvm_options for i in range(3))
    single = LocalInfraSettings(data_dir=tmp_path)
    assert "initial_token: 0\n" in cassandra.cassandra_yaml(single) and 'seeds: "127.0.0.1:7000"' in cassandra.cassandra_yaml(single)


def test_clients_of_a_cluster_replicate_what_they_create(tmp_path: Path) -> None:
    kafka_settings, cassandra_settings = secure.client_settings(_cluster(tmp_path))
    assert kafka_settings.bootstrap == "127.0.0.2:9092,127.0.0.3:9092,127.0.0.4:9092"
    assert kafka_settings.replication == 3
    assert cassandra_settings.contact_points == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert cassandra_settings.replication == "{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}"
    env = secure.client_env(_cluster(tmp_path))
    assert env["PARLEY_KAFKA_REPLICATION"] == "3" and "PARLEY_CASSANDRA_REPLICATION" in env


@pytest.mark.parametrize(("rf", "isr"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_min_insync_replicas_leaves_one_replica_to_lose(rf: int, isr: int) -> None:
    assert min_insync_replicas(rf) == isr
    assert topic_configs(KafkaSettings(replication=rf), TOPICS["chat.events"])["min.insync.replicas"] == str(isr)


def test_topics_take_three_replicas_where_there_are_brokers_for_them() -> None:
    assert [replication_factor(n) for n in (1, 2, 3, 5)] == [1, 2, 3, 3]


def test_down_finds_a_cluster_under_the_data_dir(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / "replicated" / f"cassandra-{i}").mkdir(parents=True)
    layouts = stack._layouts(LocalInfraSettings(data_dir=tmp_path))
    assert [c.replicas for c in layouts] == [1, 3]
    assert stack._layouts(LocalInfraSettings(data_dir=tmp_path / "none")) == [LocalInfraSettings(data_dir=tmp_path / "none")]


def test_the_cli_refuses_a_cluster_size_by_its_setting(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    result = CliRunner().invoke(app, ["infra", "status", "--replicas", "0"], env={"PARLEY_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert "PARLEY_INFRA_REPLICAS=0" in result.output
    listed = CliRunner().invoke(app, ["infra", "status", "--replicas", "3"], env={"PARLEY_DATA_DIR": str(tmp_path)})
    assert listed.exit_code == 0
    assert all(name in listed.output for name in ("kafka-2", "cassandra-2", "127.0.0.4:9042"))
