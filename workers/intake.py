"""The worker's member of consumer group ``workers.<pool>``: poll, pause, commit what is finished.

confluent-kafka's consumer blocks, so every call on it runs in one thread of
its own (``Intake``'s executor): polls, pauses, offset stores, commits and the
rebalance callbacks librdkafka runs inside a poll. The asyncio side only posts
``finished(partition, offset)``; the thread folds those into the
``OffsetTracker`` and stores the partition's watermark, so a commit never
passes a request that is still running.

The consumer commits nothing itself: every offset commit of the group goes
through the worker's transactional producer (workers/transactions.py), fenced
by this member's generation, with the positions ``positions()`` reports. On
revocation the callback asks the event loop to abandon that partition's jobs
and waits for it, then commits the watermark in an offsets-only transaction:
the new owner starts at the first unfinished request. Nothing of a revoked
partition is reported after.

On assignment it notes each partition's end offset: a record below it was
already there, so a previous owner may have started (or even finished) it;
``poll`` marks those ``inherited`` and the scheduler looks them up
(workers/recovery.py) before generating. So is a record appended later that
the router marks a ``repeat``: the context builder sends a turn again after
its restart, the router sends the second record where the first went, and
the previous owner may have run the first. Other records cannot have been
seen by anyone else and go straight through.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from parley.consumer import Delivery, EventConsumer, watermarks
from parley.kafka import EventProducer
from parley.settings import KafkaSettings
from schemas.catalog import inference_topic
from schemas.events import InferenceRouted
from workers.offsets import OffsetTracker

log = logging.getLogger(__name__)

#: How long one poll blocks: also how soon a pause, resume or stored offset takes effect.
POLL_S = 0.1
#: How long a revocation waits for the event loop to stop that partition's jobs.
REVOKE_TIMEOUT_S = 30.0
#: How long asking a newly assigned partition's end offset may take (inside the rebalance callback).
END_OFFSET_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Taken:
    """A record this member now holds."""

    delivery: Delivery
    inherited: bool  # it was in the partition when assigned: a previous owner may have started it


class _GroupConsumer(EventConsumer):
    """EventConsumer plus the rebalance callbacks and pause/resume it does not expose.

    It also defers the offset stores EventConsumer makes for dead-lettered
    records: storing one past a poison record would commit past a request
    still running below it, so they go through the tracker like the rest.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        group: str,
        topic: str,
        producer: EventProducer,
        callbacks: dict[str, Callable[[Consumer, list[TopicPartition]], None]],
        overrides: dict[str, Any],
    ) -> None:
        super().__init__(settings, group, [topic], producer, **overrides)
        self.topic = settings.topic(topic)
        self.dead: list[tuple[int, int]] = []
        # EventConsumer.__init__ subscribed without callbacks; subscribing again before the first poll replaces it.
        self._consumer.subscribe([self.topic], **callbacks)

    def store(self, topic: str, partition: int, offset: int) -> None:
        self.dead.append((partition, offset))

    def group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def end_offset(self, partition: int) -> int:
        return watermarks(self._consumer, TopicPartition(self.topic, partition), END_OFFSET_TIMEOUT_S)[1]

    def pause_all(self) -> None:
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.pause(assigned)

    def resume_all(self) -> None:
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.resume(assigned)


class Intake:
    def __init__(
        self,
        kafka: KafkaSettings,
        pool: str,
        group: str,
        producer: EventProducer,
        on_revoked: Callable[[list[int]], Awaitable[Any]],
        commit_offsets: Callable[[], None],
        session_timeout_ms: int | None = None,
        client_id: str | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_revoked = on_revoked
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"intake-{pool}")
        self._lock = threading.Lock()  # guards _finished and _owned, shared with the event loop
        self._finished: list[tuple[int, int]] = []
        self._owned: set[int] = set()
        self._assigned_once = False  # the group's first assignment has come (possibly of no partition)
        self._positions: dict[int, int] = {}  # owned partition → commit position (the first unfinished offset)
        self._read_to: dict[int, int] = {}  # owned partition → one past the last record taken (the heartbeat's)
        self._commit_offsets = commit_offsets
        self._metadata: Any = None  # consumer_group_metadata(), refreshed on the intake thread
        self._tracker = OffsetTracker()  # touched only on the intake thread
        self._paused = False
        #: partition → its end offset when assigned (None: unknown, asked again on the next record)
        self._ends: dict[int, int | None] = {}  # touched only on the intake thread
        overrides: dict[str, Any] = {
            "enable.auto.commit": False,  # offsets are committed in the worker's transactions only
            # Also makes the start offset of a partition wait for a pending transaction of its old owner.
            "isolation.level": "read_committed",
        }
        if client_id:
            overrides["client.id"] = client_id  # `parley ops groups` shows it
        if session_timeout_ms is not None:
            # How soon a member that died (no goodbye) loses its partitions; heartbeats a third of it.
            overrides["session.timeout.ms"] = session_timeout_ms
            overrides["heartbeat.interval.ms"] = max(100, session_timeout_ms // 3)
        self._consumer = _GroupConsumer(
            kafka,
            group,
            inference_topic(pool),
            producer,
            {"on_assign": self._assigned, "on_revoke": self._revoked, "on_lost": self._lost},
            overrides,
        )

    # ------------------------------------------------------------ event-loop side

    @property
    def owned(self) -> list[int]:
        with self._lock:
            return sorted(self._owned)

    @property
    def assigned(self) -> bool:
        """The group has assigned this member its partitions (none, if it has more members than partitions)."""
        with self._lock:
            return self._assigned_once

    def positions(self) -> dict[int, int]:
        """Owned partition → the offset the group should resume it at (workers/transactions.GroupView)."""
        with self._lock:
            return dict(self._positions)

    def read_to(self) -> dict[int, int]:
        """Owned partition → the offset of the next record it will take, for partitions it took one from: the
        router counts what lies past it as the pool's backlog (streams/route_backlog.py)."""
        with self._lock:
            return dict(self._read_to)

    def group_metadata(self) -> Any:
        """The member's group metadata as of the last poll or rebalance (None before the first).

        Read on the intake thread and handed over: confluent-kafka serialises calls on one
        consumer, so asking it from the committer's thread waited on the intake's polls
        (bench.pipeline: a reply's close went from 6 ms to ~0.5 s)."""
        with self._lock:
            return self._metadata

    def finished(self, partition: int, offset: int) -> None:
        """A request's closing events are acknowledged; its offset may count as done."""
        with self._lock:
            self._finished.append((partition, offset))

    async def poll(self, max_records: int, accepting: bool) -> list[Taken]:
        return await self._loop.run_in_executor(self._executor, self._poll, max(1, max_records), accepting)

    async def close(self) -> None:
        """Store what finished, commit, leave the group."""
        await self._loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)

    # ------------------------------------------------------------ intake thread

    def _poll(self, max_records: int, accepting: bool) -> list[Taken]:
        self._apply_finished()
        if accepting:
            if self._paused:
                self._consumer.resume_all()
                self._paused = False
        else:
            # Every time, not once: partitions assigned since the last pause start unpaused.
            self._consumer.pause_all()
            self._paused = True
        deliveries = self._consumer.poll(timeout=POLL_S, max_records=max_records)
        self._refresh_metadata()
        return self._register(deliveries)

    def _refresh_metadata(self) -> None:
        metadata = self._consumer.group_metadata()
        with self._lock:
            self._metadata = metadata

    def _register(self, deliveries: list[Delivery]) -> list[Taken]:
        """Start what was polled in offset order; dead-lettered records finish at once."""
        with self._lock:
            owned = set(self._owned)
        dead = set(self._consumer.dead)
        self._consumer.dead.clear()
        marks = sorted([(d.partition, d.offset) for d in deliveries] + list(dead))
        taken: set[tuple[int, int]] = set()
        for partition, offset in marks:
            if partition not in owned:
                continue  # revoked during this poll: the new owner reads it
            try:
                self._tracker.start(partition, offset)
            except ValueError:
                log.warning("record polled again; skipped", extra={"partition": partition, "offset": offset})
                continue
            self._report(partition)
            with self._lock:
                self._read_to[partition] = max(self._read_to.get(partition, 0), offset + 1)
            taken.add((partition, offset))
        for partition, offset in sorted(dead & taken):
            self._finish(partition, offset)
        return [Taken(d, self._inherited(d)) for d in deliveries if (d.partition, d.offset) in taken]

    def _inherited(self, d: Delivery) -> bool:
        end = self._ends.get(d.partition)
        if end is None:
            end = self._ends[d.partition] = self._end_offset(d.partition)
        if end is None or d.offset < end:  # unknown: look it up, the safe side
            return True
        # Appended since, but a second record of an attempt (the context builder sent the turn again after
        # its restart): the partition's owner when the first came may have run it.
        return isinstance(d.event, InferenceRouted) and d.event.repeat

    def _end_offset(self, partition: int) -> int | None:
        try:
            return self._consumer.end_offset(partition)
        except KafkaException as exc:
            log.warning("end offset of an assigned partition unknown", extra={"partition": partition, "error": str(exc)})
            return None

    def _apply_finished(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
            owned = set(self._owned)
        for partition, offset in finished:
            if partition in owned:
                self._finish(partition, offset)

    def _finish(self, partition: int, offset: int) -> None:
        if self._tracker.finish(partition, offset) is not None:
            self._report(partition)

    def _report(self, partition: int) -> None:
        position = self._tracker.position(partition)
        with self._lock:
            if position is not None and partition in self._owned:
                self._positions[partition] = position

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ps = [tp.partition for tp in partitions]
        self._refresh_metadata()  # the new generation, before any record of it is taken
        with self._lock:
            self._owned.update(ps)
            self._assigned_once = True
        for p in ps:
            self._tracker.drop(p)  # a fresh start: the committed offset is where this owner begins
            self._ends[p] = self._end_offset(p)
        log.info("partitions assigned", extra={"partitions": ps})

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ps = [tp.partition for tp in partitions]
        self._refresh_metadata()
        self._stop_jobs(ps)
        self._apply_finished()
        committed = {p: pos for p, pos in self.positions().items() if p in ps}
        self._commit_offsets()  # still a member of this generation: the commit is accepted
        self._forget(ps)
        log.info("partitions revoked", extra={"partitions": ps, "committed": committed})

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ps = [tp.partition for tp in partitions]
        self._stop_jobs(ps)  # another member owns them already: commit nothing
        self._forget(ps)
        log.warning("partitions lost", extra={"partitions": ps})

    def _stop_jobs(self, partitions: list[int]) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._on_revoked(partitions), self._loop).result(REVOKE_TIMEOUT_S)
        except Exception as exc:  # a callback must not raise into librdkafka
            log.error(
                "could not stop the jobs of revoked partitions", extra={"partitions": partitions, "error": repr(exc)}
            )

    def _forget(self, partitions: list[int]) -> None:
        with self._lock:
            self._owned.difference_update(partitions)
            for p in partitions:
                self._positions.pop(p, None)
                self._read_to.pop(p, None)
        for p in partitions:
            self._tracker.drop(p)
            self._ends.pop(p, None)

    def _close(self) -> None:
        self._apply_finished()
        self._commit_offsets()
        try:
            self._consumer.close()
        except KafkaException as exc:
            log.warning("consumer close reported an error", extra={"error": str(exc)})
