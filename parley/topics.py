"""Create and verify the catalog's topics on the broker (``parley topics``).

Missing topics are created; configs that drifted are set back to the catalog's
values (safe at any time). A partition count that differs is reported, never
changed: adding partitions moves conversations to other partitions and breaks
per-conversation order, so that is an operator's deliberate migration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS, Topic


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
        existing = client.list_topics(timeout=10).topics
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot list topics at {settings.bootstrap}: {exc}") from exc

    reports = {t.name: TopicReport(t.name) for t in topics}
    to_create = [
        NewTopic(settings.topic(t.name), t.partitions, settings.replication, config=t.configs)
        for t in topics
        if settings.topic(t.name) not in existing
    ]
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


def _await_metadata(client: AdminClient, names: list[str], timeout: float = 15.0) -> None:
    """Creation is acknowledged by the controller before every broker's metadata shows it."""
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
        drift = {
            k: (actual[k].value if k in actual else "", v)
            for k, v in t.configs.items()
            if k not in actual or actual[k].value != v
        }
        if drift and fix_configs:
            _set_configs(client, name, t.configs)
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
