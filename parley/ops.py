"""What an operator asks the cluster: consumer lag, group membership, topic drift.

The questions are answered with Kafka's admin API (no consumer joins any
group, so asking never triggers a rebalance). The folds from admin answers to
rows are plain functions, unit-tested without a broker; ``parley ops`` (in
``tools/ops_cli.py``) renders them. It sits in the shared shell, not in
``tools``, because workers and processors export their lag with it
(``register_lag``, below); which groups are the deployment's is the
topology's answer (``tools.topology.deployment_groups``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client import REGISTRY

from parley import metrics
from parley.consumer import TRANSIENT
from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from parley.transport_security import kafka_config
from schemas.catalog import TOPICS

#: Admin calls answer in milliseconds on a healthy broker; this bounds a sick one.
ADMIN_TIMEOUT_S = 10.0

Partition = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class LagRow:
    group: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed on this partition
    end: int

    @property
    def lag(self) -> int:
        """Records not yet done: with no commit, the whole partition (the group starts at earliest)."""
        return self.end - (self.committed if self.committed is not None else 0)


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class Group:
    group: str
    state: str
    members: tuple[Member, ...] = field(default_factory=tuple)


def lag_rows(group: str, committed: Mapping[Partition, int | None], ends: Mapping[Partition, int]) -> list[LagRow]:
    """One row per partition the group reads: its commit against the partition's end (pure)."""
    rows = [LagRow(group, topic, p, committed.get((topic, p)), end) for (topic, p), end in ends.items()]
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def total_lag(rows: Iterable[LagRow]) -> dict[str, int]:
    """Lag summed per group (pure)."""
    totals: dict[str, int] = {}
    for r in rows:
        totals[r.group] = totals.get(r.group, 0) + r.lag
    return totals


def in_namespace(topic: str, prefix: str) -> bool:
    """A topic of this deployment: the catalog's name under this deployment's prefix (pure)."""
    return topic.startswith(prefix) and topic[len(prefix):] in TOPICS


def compact(partitions: Iterable[Partition]) -> str:
    """``chat.events[0-5,8]`` for a member's partitions (pure)."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    out = []
    for topic, ps in by_topic.items():
        runs: list[list[int]] = []
        for p in ps:
            if runs and p == runs[-1][-1] + 1:
                runs[-1].append(p)
            else:
                runs.append([p])
        spans = ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
        out.append(f"{topic}[{spans}]")
    return " ".join(out)


def retention(configs: Mapping[str, str]) -> str:
    """A topic's retention in an operator's words (pure)."""
    if "compact" in configs.get("cleanup.policy", ""):
        return "compacted"
    ms = int(configs.get("retention.ms", "604800000"))  # Kafka's default: 7 d
    if ms < 0:
        return "forever"
    return f"{ms / 86_400_000:g} d" if ms >= 86_400_000 else f"{ms / 3_600_000:g} h"


class Ops:
    """The admin-API edge. Kafka errors become ``BrokerUnavailable`` with the address in the message."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._admin = AdminClient(kafka_config(kafka))

    def _wait(self, fut, what: str):  # type: ignore[no-untyped-def]
        try:
            return fut.result(timeout=ADMIN_TIMEOUT_S)
        except (KafkaException, TimeoutError) as exc:
            raise BrokerUnavailable(f"{what} failed at {self.kafka.bootstrap}: {exc}") from exc

    def group_ids(self) -> list[str]:
        listed = self._wait(self._admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S), "listing groups")
        return sorted(g.group_id for g in listed.valid)

    def committed(self, group: str) -> dict[Partition, int | None]:
        futures = self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        answer = self._wait(futures[group], f"reading the offsets of {group}")
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in answer.topic_partitions}

    def end_offsets(self, partitions: Iterable[Partition], earliest: bool = False) -> dict[Partition, int]:
        """Each partition's end offset (the next record's), or with ``earliest`` the log's start."""
        spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()
        request = {TopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:  # asked again while the broker's answer is transient, as parley.consumer.watermarks does
            futures = self._admin.list_offsets(request, request_timeout=ADMIN_TIMEOUT_S)
            try:
                return {(tp.topic, tp.partition): f.result(timeout=ADMIN_TIMEOUT_S).offset for tp, f in futures.items()}
            except KafkaException as exc:
                if exc.args[0].code() not in TRANSIENT or time.monotonic() >= deadline:
                    raise BrokerUnavailable(f"reading end offsets failed at {self.kafka.bootstrap}: {exc}") from exc
                time.sleep(0.2)
            except TimeoutError as exc:
                raise BrokerUnavailable(f"reading end offsets failed at {self.kafka.bootstrap}: {exc}") from exc

    def partitions_of(self, topics: Iterable[str]) -> list[Partition]:
        metadata = self._admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
        return [(t, p) for t in topics if t in metadata for p in metadata[t].partitions]

    def groups(self, ids: list[str] | None = None) -> list[Group]:
        ids = self.group_ids() if ids is None else ids
        if not ids:
            return []
        out = []
        for gid, fut in self._admin.describe_consumer_groups(ids, request_timeout=ADMIN_TIMEOUT_S).items():
            d = self._wait(fut, f"describing {gid}")
            members = tuple(
                Member(
                    m.member_id,
                    m.client_id,
                    m.host,
                    tuple(sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))),
                )
                for m in d.members
            )
            out.append(Group(gid, str(d.state).rsplit(".", 1)[-1].lower(), members))
        return sorted(out, key=lambda g: g.group)

    def lag(self, groups: list[str]) -> list[LagRow]:
        """Lag of the named groups on the topics of this deployment's prefix."""
        prefix = self.kafka.topic_prefix
        rows: list[LagRow] = []
        described = {g.group: g for g in self.groups(groups)}
        for gid in groups:
            committed = {tp: o for tp, o in self.committed(gid).items() if in_namespace(tp[0], prefix)}
            # Partitions assigned to live members count too: a group that never committed still lags.
            assigned = {tp for m in described[gid].members for tp in m.partitions} if gid in described else set()
            topics = {t for t, _ in committed} | {t for t, _ in assigned if in_namespace(t, prefix)}
            if not topics:
                continue
            ends = self.end_offsets(self.partitions_of(sorted(topics)))
            rows.extend(lag_rows(gid, committed, ends))
        return rows


def register_lag(kafka: KafkaSettings, groups: list[str]) -> None:
    """Export the lag of ``groups`` from this process's /metrics."""
    ops = Ops(kafka)

    def rows() -> Iterator[tuple[str, str, int, int]]:
        for r in ops.lag(groups):
            yield r.group, r.topic, r.partition, r.lag

    REGISTRY.register(metrics.LagCollector(rows))
