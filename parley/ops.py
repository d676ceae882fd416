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

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client import REGISTRY

from parley import metrics
from parley.consumer import TRANSIENT, reader, watermarks
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


class OffsetReader:
    """Committed and end offsets through the consumer protocol (OffsetFetch, ListOffsets), never the admin
    API, for what asks again and again in a long-lived process (the router's backlog every second, the lag
    on every scrape). librdkafka's admin group requests abort the whole process when a broker restarts
    while one is in flight (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``,
    confluentinc/librdkafka#4605, open; bench.chaos killed the router with it). ``parley ops`` keeps the
    admin API: it asks once. Blocking: call from a thread. Not thread-safe: one caller at a time."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._groups: dict[str, Consumer] = {}  # one per group asked about: committed() reads its group
        self._plain = reader(kafka, "offsets")

    def _of(self, group: str) -> Consumer:
        if group not in self._groups:
            # Never subscribes: it only asks the group's coordinator for its offsets, and joins nothing.
            self._groups[group] = Consumer(kafka_config(self.kafka) | {"group.id": group, "enable.auto.commit": False})
        return self._groups[group]

    def _topics(self) -> dict[str, Any]:
        try:
            return self._plain.list_topics(timeout=ADMIN_TIMEOUT_S).topics
        except KafkaException as exc:
            raise BrokerUnavailable(f"listing topics failed at {self.kafka.bootstrap}: {exc}") from exc

    def partitions_of(self, topics: Iterable[str]) -> list[Partition]:
        metadata = self._topics()
        return [(t, p) for t in topics if t in metadata for p in metadata[t].partitions]

    def committed(self, group: str, partitions: Iterable[Partition]) -> dict[Partition, int | None]:
        asked = [TopicPartition(t, p) for t, p in partitions]
        if not asked:
            return {}
        try:
            got = self._of(group).committed(asked, timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            raise BrokerUnavailable(f"reading the offsets of {group} failed at {self.kafka.bootstrap}: {exc}") from exc
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}

    def watermarks(self, partitions: Iterable[Partition]) -> dict[Partition, tuple[int, int]]:
        """Each partition's (log start, end)."""
        out = {}
        for t, p in partitions:
            try:
                out[(t, p)] = watermarks(self._plain, TopicPartition(t, p), ADMIN_TIMEOUT_S)
            except KafkaException as exc:
                raise BrokerUnavailable(f"reading offsets of {t}[{p}] failed at {self.kafka.bootstrap}: {exc}") from exc
        return out

    def lag(self, groups: list[str]) -> list[LagRow]:
        """Lag of ``groups`` on every partition of this deployment's topics where they committed (a group
        that has committed nothing yet shows none: what it is assigned is only known to the admin API)."""
        ours = sorted(t for t in self._topics() if in_namespace(t, self.kafka.topic_prefix))
        partitions = self.partitions_of(ours)
        rows: list[LagRow] = []
        for gid in groups:
            committed = {tp: o for tp, o in self.committed(gid, partitions).items() if o is not None}
            ends = {tp: high for tp, (_, high) in self.watermarks(committed).items()}
            rows.extend(lag_rows(gid, committed, ends))
        return rows

    def close(self) -> None:
        for consumer in [*self._groups.values(), self._plain]:
            consumer.close()


def register_lag(kafka: KafkaSettings, groups: list[str]) -> None:
    """Export the lag of ``groups`` from this process's /metrics (through ``OffsetReader``: a scrape
    during a broker restart must not abort the process)."""
    offsets = OffsetReader(kafka)
    lock = threading.Lock()  # scrapes may overlap; the reader's consumers are used by one caller at a time

    def rows() -> Iterator[tuple[str, str, int, int]]:
        with lock:
            found = offsets.lag(groups)
        for r in found:
            yield r.group, r.topic, r.partition, r.lag

    REGISTRY.register(metrics.LagCollector(rows))
