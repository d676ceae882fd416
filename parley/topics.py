"""Create and verify the catalog's topics on the broker (``parley topics``).

Missing topics are created; configs that drifted are set back to the catalog's
values (safe at any time). A partition count that differs is reported, never
changed: adding partitions moves conversations to other partitions and breaks
per-conversation order, so that is an operator's deliberate migration.

Topics get ``PARLEY_KAFKA_REPLICATION`` replicas and ``min.insync.replicas`` from
``min_insync_replicas``: at 3 replicas a write (acks=all) needs 2 in sync, so one
broker may be away and an acknowledged event is still on two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS, Topic


def replication_factor(brokers: int) -> int:
    """The replicas a cluster of ``brokers`` gives each topic: 3 where it can (the local replicated
    cluster sets PARLEY_KAFKA_REPLICATION to this, and its internal topics too)."""
    return min(3, brokers)


def min_insync_replicas(replication: int) -> int:
    """In-sync replicas an acks=all write needs: one fewer than the replicas, at least 1 and at most 2,
    so a topic keeps taking writes with one replica away, and an acknowledged write is on two from RF 3."""
    return max(1, min(2, replication - 1))


def topic_configs(settings: KafkaSettings, topic: Topic) -> dict[str, str]:
    """The configs ``topic`` must have on the broker: the catalog's, and its durability."""
    return {**topic.configs, "min.insync.replicas": str(min_insync_replicas(settings.replication))}


@dataclass
class TopicReport:
    name: str
    created: bool = False
    partitions: int = 0
    config_fixed: dict[str, tuple[str, str]] = field(default_factory=dict)  # key → (was, now)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def ensure_topics(
    settings: KafkaSettings, client: AdminClient, topics: list[Topic] | None = None
) -> list[TopicReport]:
    topics = list(TOPICS.values()) if topics is None else topics
    try:
        metadata = client.list_topics(timeout=10)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot list topics at {settings.bootstrap}: {exc}") from exc

    reports = {t.name: TopicReport(t.name) for t in topics}
    existing = metadata.topics
    to_create = [
        NewTopic(settings.topic(t.name), t.partitions, settings.replication, config=topic_configs(settings, t))
        for t in topics
        if settings.topic(t.name) not in existing
    ]
    if to_create and settings.replication > len(metadata.brokers):
        raise BrokerUnavailable(
            f"PARLEY_KAFKA_REPLICATION={settings.replication}, but the cluster at {settings.bootstrap} has "
            f"{len(metadata.brokers)} broker(s) up to hold the replicas: lower it, or start the missing brokers"
        )
    if to_create:
        for name, fut in client.create_topics(to_create, operation_timeout=30).items():
            try:
                fut.result()
                reports[name.removeprefix(settings.topic_prefix)].created = True
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # another process won the race
                    raise BrokerUnavailable(f"cannot create {name}: {exc}") from exc

        _await_metadata(client, [t.topic for t in to_create])

    for report in verify_topics(settings, client, topics):
        report.created = reports[report.name].created
        reports[report.name] = report
    return list(reports.values())


def _await_metadata(client: AdminClient, names: list[str], timeout: float = 60.0) -> None:
    """Creation is acknowledged by the controller before every broker's metadata shows it (a replicated
    cluster on a busy machine took over 15 s: the verification then found the topic missing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        known = client.list_topics(timeout=5).topics
        if all(
            n in known and not known[n].error and all(p.leader >= 0 and not p.error for p in known[n].partitions.values())
            for n in names
        ):
            return
        time.sleep(0.1)


def verify_topics(
    settings: KafkaSettings, client: AdminClient, topics: list[Topic] | None = None, *, fix_configs: bool = True
) -> list[TopicReport]:
    """Compare the broker with the catalog; with ``fix_configs`` set drifted configs back."""
    topics = list(TOPICS.values()) if topics is None else topics
    metadata = client.list_topics(timeout=10).topics
    reports = []
    present = [t for t in topics if settings.topic(t.name) in metadata]
    resources = [ConfigResource("topic", settings.topic(t.name)) for t in present]
    described = client.describe_configs(resources) if resources else {}
    actual_configs = {res.name: fut.result() for res, fut in described.items()}
    for t in topics:
        name = settings.topic(t.name)
        report = TopicReport(t.name)
        reports.append(report)
        if name not in metadata:
            report.problems.append("missing")
            continue
        report.partitions = len(metadata[name].partitions)
        if report.partitions != t.partitions:
            report.problems.append(f"has {report.partitions} partitions, catalog says {t.partitions}")
        actual = actual_configs[name]
        wanted = topic_configs(settings, t)
        drift = {
            k: (actual[k].value if k in actual else "", v)
            for k, v in wanted.items()
            if k not in actual or actual[k].value != v
        }
        if drift and fix_configs:
            _set_configs(client, name, wanted)
            report.config_fixed = drift
        elif drift:
            report.problems.extend(f"{k} is {was!r}, catalog says {now!r}" for k, (was, now) in drift.items())
    return reports


def _set_configs(client: AdminClient, name: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(
        "topic",
        name,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()],
    )
    for fut in client.incremental_alter_configs([resource]).values():
        fut.result()
