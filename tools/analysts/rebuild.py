"""`parley rebuild`: the Cassandra projections recreated from the archive and the log, into an empty keyspace.

The same code as the materializer, minus the service: each ``chat.events`` record is folded
into its conversation (``streams.tree.apply``) and turned into writes by
``streams.projection.writes_for``; each ``user.memory`` snapshot by ``streams.memory``; the
writes go through ``streams.store.Store`` as the materializer's do. The keyspace starts
empty, so the conversations' states start empty too (no reads). Writes carry their event's
timestamp and commute, so they wait by partition and go as one unlogged batch of a partition
each (one request, one mutation: ``Store.write``), many batches in flight at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from parley.cassandra import connect
from parley.errors import ConfigError
from parley.migrate import migrate
from parley.settings import CassandraSettings, KafkaSettings
from schemas import codec
from schemas import events as ev
from schemas import sealing
from streams.projection import Write, writes_for
from streams.store import BATCH_MAX, Store
from streams.tree import Conversation, apply, empty
from tools.analysts import timeline
from tools.analysts.digest import PROJECTED
from tools.analysts.location import Location

log = logging.getLogger(__name__)

TOPICS = ("chat.events", "user.memory")
#: A partition's writes wait until this many (one batch: streams.store.BATCH_MAX) ...
PER_BATCH = BATCH_MAX
#: ... or until this many wait in all, when every partition's are sent.
PENDING_MAX = 8192
#: Batches in flight at once: reading the log goes on while Cassandra takes them.
IN_FLIGHT = 32


class KeyspaceNotEmpty(ConfigError):
    pass


@dataclass
class RebuildReport:
    keyspace: str
    events: int = 0  # records folded (both topics)
    writes: int = 0
    invalid: int = 0  # records that do not decode or hold a malformed id: skipped, as the materializer dead-letters them
    seconds: float = 0.0
    stats: timeline.TimelineStats = field(default_factory=timeline.TimelineStats)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def prepare(cassandra: CassandraSettings) -> None:
    """Create and migrate the keyspace; refuse one whose projected tables hold rows."""
    session = connect(cassandra)
    try:
        migrate(session, cassandra.keyspace, cassandra.replication)
        for table in PROJECTED:
            if session.execute(f"SELECT * FROM {cassandra.keyspace}.{table} LIMIT 1").one() is not None:
                raise KeyspaceNotEmpty(
                    f"keyspace {cassandra.keyspace} already has rows in {table}; rebuild needs an empty one (--keyspace)"
                )
    finally:
        session.cluster.shutdown()


class _Sender:
    """Batches in flight through ``store``, at most IN_FLIGHT; the first failure is raised on the next send."""

    def __init__(self, store: Store, report: RebuildReport) -> None:
        self._store = store
        self._report = report
        self._in_flight: set[asyncio.Task[None]] = set()

    async def send(self, work: Coroutine[Any, Any, None], writes: int) -> None:
        while len(self._in_flight) >= IN_FLIGHT:
            done, _ = await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
            self._in_flight.difference_update(done)
            for task in done:
                task.result()
        self._in_flight.add(asyncio.create_task(work))
        self._report.writes += writes

    async def drain(self) -> None:
        while self._in_flight:
            await self._in_flight.pop()


async def _run(kafka: KafkaSettings, cassandra: CassandraSettings, location: Location | None, report: RebuildReport,
               on_batch: Callable[[int], None] | None, on_plan: Callable[[int], None] | None) -> None:
    store = Store(cassandra)
    sender = _Sender(store, report)
    states: dict[str, Conversation] = {}
    # Writes waiting, by partition: sent as one batch each (streams.store.Store.write). They commute (each
    # carries its event's timestamp), so a partition's batches may land in any order.
    pending: dict[tuple[str, Any], list[Write]] = {}
    waiting = 0

    try:
        for raw in timeline.read(kafka, list(TOPICS), location=location, stats=report.stats, on_batch=on_batch, on_plan=on_plan):
            try:
                event = codec.decode(raw.value)
                if isinstance(event, ev.MemoryUpdated):
                    await sender.send(store.write_memory(event), len(event.facts) + 1)
                    report.events += 1
                    continue
                cid = str(getattr(event, "conversation_id", ""))
                state = states.get(cid) or empty(cid)
                writes = writes_for(state, event, sealing.sealer())
                states[cid] = apply(state, event)
            except (codec.CodecError, ValueError) as exc:
                report.invalid += 1
                log.warning("record skipped", extra={"topic": raw.topic, "offset": raw.offset, "error": type(exc).__name__})
                continue
            report.events += 1
            for w in writes:
                group = pending.setdefault(w.partition, [])
                group.append(w)
                if len(group) >= PER_BATCH:
                    del pending[w.partition]
                    waiting -= len(group) - 1
                    await sender.send(store.write(group), len(group))
                else:
                    waiting += 1
            if waiting >= PENDING_MAX:
                await _send_all(sender, store, pending)
                waiting = 0
        await _send_all(sender, store, pending)
        await sender.drain()
    finally:
        store.close()


async def _send_all(sender: _Sender, store: Store, pending: dict[tuple[str, Any], list[Write]]) -> None:
    for group in pending.values():
        await sender.send(store.write(group), len(group))
    pending.clear()


def rebuild(
    kafka: KafkaSettings,
    cassandra: CassandraSettings,
    location: Location | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> RebuildReport:
    """Project ``chat.events`` and ``user.memory`` (archive, then Kafka) into ``cassandra.keyspace``."""
    prepare(cassandra)
    report = RebuildReport(cassandra.keyspace)
    began = time.perf_counter()
    asyncio.run(_run(kafka, cassandra, location, report, on_batch, on_plan))
    report.seconds = time.perf_counter() - began
    return report
