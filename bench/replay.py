"""Replay and rebuild throughput, each against its ceiling measured in the same run.

Writes a synthetic but realistic log (``tools.analysts.sample``: posts, regenerations,
cancels, sheds, cache hits) to prefixed topics on the running Kafka, then:

- replay against a bare confluent-kafka read of the same records (assign, poll, no decode),
  alternating, best of ``--rounds`` each. The bare read is timed two ways: from a consumer
  that is already connected (it looks up the end offsets first, as a replay's plan does:
  the fair baseline), and from a cold one, as this benchmark used to (its first poll waits
  about half a second for librdkafka's first fetch, which on a log this size is most of
  its time);
- ``parley rebuild`` of ``chat.events`` into a scratch keyspace, against the driver writing
  the rebuild's own writes with nothing else to do (the ceiling): one prepared statement at
  a time (``execute_concurrent_with_args``), and as the rebuild sends them, one unlogged
  batch per partition (``execute_concurrent``). cassandra-stress is not in the Maven
  artifacts the local Cassandra runs from, so the ceiling is the Python driver's;
- the live materializer's core (``streams.materializer.Materializer`` on the real store),
  one event at a time, no faust and no Kafka: the latency of one event's reads and writes.
  (The faust runner handles different conversations at once, ``streams/lanes.py``; that
  is not measured here.)

- replay of the same log written sealed (DESIGN.md §12: every content field encrypted under its
  user's data key) against it written plain, alternating: what opening the content costs a replay.

Topics and keyspaces are dropped afterwards. The rebuild's writes/s and the projection's writes per
posted message (and the share the gateway writes through as well) go to ``bench/results/replay.json``
(bench/results.py), beside the driver's ceiling: ``parley capacity`` sizes Cassandra's writes by them.

Run: `python -m bench.replay [--conversations N] [--turns T]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args
from cassandra.query import BatchStatement, BatchType
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.results import record, this_command
from parley.cassandra import connect
from parley.consumer import poll_batch, watermarks
from parley.kafka import EventProducer
from parley.migrate import migrate
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import events as ev
from schemas import sealing
from schemas.catalog import TOPICS
from streams.materializer import Materializer
from streams.projection import Write, cql, writes_for
from streams.settings import MaterializerSettings
from streams.store import Store, by_partition
from streams.tree import Conversation, apply, empty
from tools import isolated
from tools.analysts import rebuild, replay, sample, turns

#: Conversations the materializer's core is timed over (it is slow: one round trip per event).
LIVE_CONVERSATIONS = 300


def produce(kafka: KafkaSettings, sent: list[sample.Sent]) -> None:
    producer = EventProducer(kafka, **{"linger.ms": 20, "batch.num.messages": 10000})
    failures: list[str] = []
    for s in sent:
        partition = s.event.partition if isinstance(s.event, ev.InferenceRouted) else None
        producer.produce(s.event, lambda err, msg: failures.append(str(err)) if err else None,
                         topic=kafka.topic(s.topic), partition=partition)
    left = producer.flush(120)
    producer.close()
    if left or failures:
        raise SystemExit(f"producing the sample failed: {left} undelivered, {failures[:3]}")


# ------------------------------------------------------------------ replay vs the bare read


def raw_rate(kafka: KafkaSettings, topics: tuple[str, ...], expected: int, *, connected: bool) -> float:
    """Records/s of a bare read of every partition from the beginning (no decode).

    ``connected``: the end offsets are looked up first (inside the timing), which connects the
    consumer to the brokers before it is assigned anything, as a replay's plan does."""
    began = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "bench-replay-raw", "enable.auto.commit": False,
                         "fetch.max.bytes": 16 * 1024 * 1024, "max.partition.fetch.bytes": 4 * 1024 * 1024})
    tps = [TopicPartition(kafka.topic(t), p, OFFSET_BEGINNING) for t in topics for p in range(TOPICS[t].partitions)]
    if connected:
        for tp in tps:
            watermarks(consumer, TopicPartition(tp.topic, tp.partition), 10)
    else:
        began = time.perf_counter()  # as before: from the assignment of a cold consumer
    consumer.assign(tps)
    seen = 0
    while seen < expected:
        for msg in poll_batch(consumer, 5000, 1.0):
            if not msg.error():
                seen += 1
    elapsed = time.perf_counter() - began
    consumer.close()
    return seen / elapsed


def replay_rate(kafka: KafkaSettings, out: Path) -> tuple[float, int, int]:
    began = time.perf_counter()
    result = replay.replay(kafka, replay.Query())
    replay.write([t.to_record() for t in result.turns], out)
    elapsed = time.perf_counter() - began
    return result.stats.records / elapsed, result.stats.records, len(result.turns)


# ------------------------------------------------------------------ rebuild vs the driver alone


def projected(events: list[ev.Event]) -> list[Write]:
    """The writes a rebuild makes of ``events`` (chat.events only), in log order."""
    states: dict[str, Conversation] = {}
    out: list[Write] = []
    for e in events:
        cid = e.conversation_id  # type: ignore[attr-defined]
        state = states.get(cid) or empty(cid)
        out += writes_for(state, e, sealing.sealer())
        states[cid] = apply(state, e)
    return out


#: The events the gateway appends and writes the rows of itself before the materializer does (gateway/store.py
#: ``write_through``, from an empty state): those rows are written twice in production.
WRITTEN_THROUGH = (ev.ConversationCreated, ev.MessagePosted, ev.GenerationRequested)


def written_through(events: list[ev.Event]) -> int:
    """Writes the gateway's write-through makes for ``events``."""
    return sum(len(writes_for(empty(e.conversation_id), e, sealing.sealer())) for e in events if isinstance(e, WRITTEN_THROUGH))  # type: ignore[attr-defined]


def ceiling(cassandra: CassandraSettings, writes: list[Write]) -> tuple[float, float]:
    """Writes/s of the driver alone putting ``writes`` into an empty keyspace: (one statement at a
    time, one unlogged batch per partition as the store sends them), each into a fresh keyspace."""
    rates = []
    for batched in (False, True):
        target = replace(cassandra, keyspace=f"{cassandra.keyspace}_ceiling")
        session = connect(target)
        try:
            migrate(session, target.keyspace, target.replication)
            session.set_keyspace(target.keyspace)
            prepared = {shape: session.prepare(cql(shape)) for shape in {w.shape for w in writes}}
            began = time.perf_counter()
            if batched:
                statements: list[tuple[Any, Any]] = []
                for group in by_partition(writes):
                    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                    for w in group:
                        batch.add(prepared[w.shape], w.values)
                    statements.append((batch, None))
                execute_concurrent(session, statements, concurrency=rebuild.IN_FLIGHT, raise_on_first_error=True)
            else:
                by_shape: dict[Any, list[tuple[Any, ...]]] = {}
                for w in writes:
                    by_shape.setdefault(w.shape, []).append(w.values)
                for shape, values in by_shape.items():
                    execute_concurrent_with_args(session, prepared[shape], values, concurrency=64, raise_on_first_error=True)
            rates.append(len(writes) / (time.perf_counter() - began))
            session.execute(f"DROP KEYSPACE IF EXISTS {target.keyspace}", timeout=60)
        finally:
            session.cluster.shutdown()
    return rates[0], rates[1]


async def _materialize(cassandra: CassandraSettings, events: list[ev.Event]) -> float:
    store = Store(cassandra)
    try:
        core = Materializer(from_env(MaterializerSettings), store, sealing.sealer())
        await core.handle(events[0])  # connects and prepares
        began = time.perf_counter()
        for e in events[1:]:
            await core.handle(e)
        return (len(events) - 1) / (time.perf_counter() - began)
    finally:
        store.close()


def live_rate(cassandra: CassandraSettings, conversations: int, turns_each: int) -> float:
    """Events/s of the materializer's core over a fresh keyspace, one event at a time."""
    target = replace(cassandra, keyspace=f"{cassandra.keyspace}_live")
    session = connect(target)
    try:
        migrate(session, target.keyspace, target.replication)
        events = [s.event for s in sample.session(conversations, turns_each) if s.topic == "chat.events"]
        return asyncio.run(_materialize(target, events))
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {target.keyspace}", timeout=60)
        session.cluster.shutdown()


def encryption(sent: list[sample.Sent], rounds: int) -> None:
    """Replay of the log written sealed vs written plain (the key service on this process's keyspace)."""
    from parley import keys

    service = keys.install_from_env()
    namespaces = {}
    try:
        for mode, on in (("sealed", True), ("plain", False)):
            kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), f"benchseal{mode}")
            namespaces[mode] = (kafka, cassandra)
            service.sealing = on
            produce(kafka, sent)
        rates: dict[str, list[float]] = {m: [] for m in namespaces}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(rounds):
                for mode, (kafka, _) in namespaces.items():
                    rates[mode].append(replay_rate(kafka, Path(tmp) / f"{mode}.jsonl")[0])
        sealed, plain = max(rates["sealed"]), max(rates["plain"])
        print(f"parley replay, log sealed: {sealed:,.0f} events/s; plain: {plain:,.0f} events/s; sealed / plain ratio {sealed / plain:.2f}")
    finally:
        service.sealing = True
        for kafka, cassandra in namespaces.values():
            isolated.drop(kafka, cassandra)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=1500)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--encryption-only", action="store_true", help="Only replay sealed vs plain")
    args = parser.parse_args()
    if args.encryption_only:
        encryption(sample.session(args.conversations, args.turns), args.rounds)
        return
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "benchreplay")
    try:
        sent = sample.session(args.conversations, args.turns)
        began = time.perf_counter()
        produce(kafka, sent)
        in_replay = sum(s.topic in turns.TOPICS for s in sent)
        print(f"log: {len(sent):,} events ({in_replay:,} on the replay's topics) produced in {time.perf_counter() - began:.1f} s")
        raws, colds, replays = [], [], []
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                raws.append(raw_rate(kafka, turns.TOPICS, in_replay, connected=True))
                colds.append(raw_rate(kafka, turns.TOPICS, in_replay, connected=False))
                rate, records, n_turns = replay_rate(kafka, Path(tmp) / "turns.jsonl")
                assert records == in_replay, (records, in_replay)
                replays.append(rate)
        raw, cold, rep = max(raws), max(colds), max(replays)
        print(f"raw confluent-kafka consume (no decode), connected first: {raw:,.0f} events/s")
        print(f"raw confluent-kafka consume (no decode), cold consumer:   {cold:,.0f} events/s  (the earlier baseline)")
        print(f"parley replay (read, decode, fold, JSONL): {rep:,.0f} events/s  → {n_turns:,} turns")
        print(f"replay / raw ratio: {rep / raw:.2f} (connected)  {rep / cold:.2f} (cold, as measured before)")

        report = rebuild.rebuild(kafka, cassandra)
        written = report.writes / report.seconds
        one_by_one, batched = ceiling(cassandra, projected([s.event for s in sent if s.topic == "chat.events"]))
        print(
            f"parley rebuild: {report.events:,} events → {report.writes:,} Cassandra writes in {report.seconds:.1f} s: "
            f"{report.events_per_s:,.0f} messages/s ({written:,.0f} writes/s)"
        )
        print(f"ceiling, the driver alone with the same writes: {one_by_one:,.0f} writes/s one statement at a time, "
              f"{batched:,.0f} writes/s in per-partition unlogged batches")
        print(f"rebuild / ceiling ratio: {written / batched:.2f} (batched)  {written / one_by_one:.2f} (one at a time)")
        live = live_rate(cassandra, min(LIVE_CONVERSATIONS, args.conversations), args.turns)
        print(f"materializer core, one event at a time (no faust): {live:,.0f} messages/s")
        chat_events = [s.event for s in sent if s.topic == "chat.events"]
        posted = sum(isinstance(e, ev.MessagePosted) for e in chat_events)
        per_message, through = report.writes / posted, written_through(chat_events) / posted
        print(f"per posted message: {per_message:.2f} projection writes, of which the gateway writes {through:.2f} too")
        record(
            "replay",
            {
                "rebuild_writes_per_s": written, "rebuild_events_per_s": report.events_per_s, "replay_events_per_s": rep,
                "materializer_core_events_per_s": live,
                "projection_writes_per_message": per_message, "write_through_writes_per_message": through,
            },
            baseline={"driver_batched_writes_per_s": batched, "driver_one_by_one_writes_per_s": one_by_one,
                      "raw_consume_events_per_s": raw},
            command=this_command(),
        )
        encryption(sent, args.rounds)
    finally:
        isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
