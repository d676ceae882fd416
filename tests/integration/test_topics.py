"""`parley topics` against the real broker."""

from __future__ import annotations

import time
from dataclasses import replace

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from parley.kafka import admin
from parley.settings import KafkaSettings
from parley.topics import ensure_topics, verify_topics
from schemas.catalog import TOPICS


def test_catalog_topics_exist_with_their_partitions_and_configs(kafka: KafkaSettings) -> None:
    client = admin(kafka)
    metadata = client.list_topics(timeout=10).topics
    for topic in TOPICS.values():
        name = kafka.topic(topic.name)
        assert len(metadata[name].partitions) == topic.partitions, name
    described = client.describe_configs([ConfigResource("topic", kafka.topic("fleet.heartbeats"))])
    configs = next(iter(described.values())).result()
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.ms"].value == TOPICS["fleet.heartbeats"].configs["segment.ms"]
    assert all(r.ok for r in verify_topics(kafka, client, fix_configs=False))


def test_ensure_is_a_no_op_the_second_time(kafka: KafkaSettings) -> None:
    reports = ensure_topics(kafka, admin(kafka))
    assert not any(r.created or r.config_fixed or r.problems for r in reports)


def _await_config(client, name: str, key: str, value: str, timeout: float = 10.0) -> None:
    """An altered config reaches the broker's describe answer shortly after the controller accepts it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        [fut] = client.describe_configs([ConfigResource("topic", name)]).values()
        if fut.result()[key].value == value:
            return
        time.sleep(0.1)
    raise AssertionError(f"{key} of {name} never became {value}")


def test_config_drift_is_reported_then_set_back(kafka: KafkaSettings) -> None:
    client = admin(kafka)
    name = kafka.topic("chat.tokens")
    resource = ConfigResource(
        "topic", name, incremental_configs=[ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET)]
    )
    for fut in client.incremental_alter_configs([resource]).values():
        fut.result()
    _await_config(client, name, "retention.ms", "1234")
    [report] = verify_topics(kafka, client, [TOPICS["chat.tokens"]], fix_configs=False)
    assert report.problems and "retention.ms" in report.problems[0]
    [fixed] = ensure_topics(kafka, client, [TOPICS["chat.tokens"]])
    assert fixed.config_fixed == {"retention.ms": ("1234", TOPICS["chat.tokens"].configs["retention.ms"])}
    _await_config(client, name, "retention.ms", TOPICS["chat.tokens"].configs["retention.ms"])  # the fix, too, lands later
    [after] = verify_topics(kafka, client, [TOPICS["chat.tokens"]], fix_configs=False)
    assert after.ok


def test_a_partition_mismatch_is_reported_not_changed(kafka: KafkaSettings) -> None:
    other = replace(kafka, topic_prefix=kafka.topic_prefix + "mismatch.")
    client = admin(other)
    from confluent_kafka.admin import NewTopic

    for fut in client.create_topics([NewTopic(other.topic("chat.control"), 2, 1)]).values():
        fut.result()
    try:
        [report] = verify_topics(other, client, [TOPICS["chat.control"]], fix_configs=False)
        assert any("has 2 partitions, catalog says 6" in p for p in report.problems)
    finally:
        for fut in client.delete_topics([other.topic("chat.control")]).values():
            fut.result()
