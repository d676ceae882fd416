"""Replay and rebuild throughput against the raw consume rate of the same topics, in one run.

Writes a synthetic but realistic log (``tools.analysts.sample``: posts, regenerations,
cancels, sheds, cache hits) to prefixed topics on the running Kafka, then alternates:
a bare confluent-kafka read of every record of the replay's topics (assign, poll, no
decode: the baseline) and ``parley replay`` over the same records (read, skip or decode,
fold, write JSONL). Best of ``--rounds`` each; the ratio is replay / raw. Then
``parley rebuild`` projects ``chat.events`` + ``user.memory`` into a scratch keyspace:
events/s into Cassandra. Topics and keyspace are dropped afterwards.

Run: `python -m bench.replay [--conversations N] [--turns T]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from parley.consumer import poll_batch
from parley.kafka import EventProducer
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas.catalog import TOPICS
from schemas.events import InferenceRouted
from tools import isolated
from tools.analysts import rebuild, replay, sample, turns


def produce(kafka: KafkaSettings, sent: list[sample.Sent]) -> None:
    producer = EventProducer(kafka, **{"linger.ms": 20, "batch.num.messages": 10000})
    failures: list[str] = []
    for s in sent:
        partition = s.event.partition if isinstance(s.event, InferenceRouted) else None
        producer.produce(s.event, lambda err, msg: failures.append(str(err)) if err else None,
                         topic=kafka.topic(s.topic), partition=partition)
    left = producer.flush(120)
    producer.close()
    if left or failures:
        raise SystemExit(f"producing the sample failed: {left} undelivered, {failures[:3]}")


def raw_rate(kafka: KafkaSettings, topics: tuple[str, ...], expected: int) -> float:
    """Records/s of a bare read of every partition from the beginning (no decode)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "bench-replay-raw", "enable.auto.commit": False,
                         "fetch.max.bytes": 16 * 1024 * 1024, "max.partition.fetch.bytes": 4 * 1024 * 1024})
    consumer.assign([TopicPartition(kafka.topic(t), p, OFFSET_BEGINNING) for t in topics for p in range(TOPICS[t].partitions)])
    began = time.perf_counter()
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=1500)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "benchreplay")
    try:
        sent = sample.session(args.conversations, args.turns)
        began = time.perf_counter()
        produce(kafka, sent)
        in_replay = sum(s.topic in turns.TOPICS for s in sent)
        print(f"log: {len(sent):,} events ({in_replay:,} on the replay's topics) produced in {time.perf_counter() - began:.1f} s")
        raws, replays = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                raws.append(raw_rate(kafka, turns.TOPICS, in_replay))
                rate, records, n_turns = replay_rate(kafka, Path(tmp) / "turns.jsonl")
                assert records == in_replay, (records, in_replay)
                replays.append(rate)
        raw, rep = max(raws), max(replays)
        print(f"raw confluent-kafka consume (no decode): {raw:,.0f} events/s")
        print(f"parley replay (read, decode, fold, JSONL): {rep:,.0f} events/s  → {n_turns:,} turns")
        print(f"replay / raw ratio: {rep / raw:.2f}")
        report = rebuild.rebuild(kafka, cassandra)
        print(
            f"parley rebuild: {report.events:,} events → {report.writes:,} Cassandra writes in {report.seconds:.1f} s: "
            f"{report.events_per_s:,.0f} messages/s ({report.writes / report.seconds:,.0f} writes/s)"
        )
    finally:
        isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
