"""The router_sim trace, scaled down, through the real stack: three synthetic engines on one pool.

The engines simulate a prefix cache and report ``cached_tokens``; the hit rate
here is what they reported (summed from UsageRecorded on chat.usage), for
Parley's placement and, in the same run, for sticky-free hashing of every turn
to a fresh conversation id (the baseline: no turn can find its prefix).

Run: `python -m bench.router_stack [--conversations N]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from parley.consumer import read_until, watermarks
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import UsageRecorded
from tools import isolated
from tools.client import ParleyClient
from tools.topology import CONTEXT, GATEWAY, MATERIALIZER, ROUTER, WORKER_SMALL

ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "30",
    "PARLEY_ENGINE_TOKENS_PER_S": "400",
    "PARLEY_CONTEXT_MAX_TOKENS": "60",
    "PARLEY_WORKER_HEARTBEAT_S": "1",
    "PARLEY_ROUTER_DEFAULT_POOL": "small",
    "PARLEY_ROUTER_POOLS": "small=synthetic",
}


def usage(kafka: KafkaSettings) -> list[UsageRecorded]:
    topic = kafka.topic("chat.usage")
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}"})
    parts = range(TOPICS["chat.usage"].partitions)
    marks = {p: watermarks(consumer, TopicPartition(topic, p), 10) for p in parts}
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out = []
    # To each partition's end by position: the workers' commit markers take offsets and never arrive.
    for msg in read_until(consumer, {(topic, p): high for p, (low, high) in marks.items() if high > low}, 60):
        event = codec.decode(msg.value())
        if isinstance(event, UsageRecorded):
            out.append(event)
    consumer.close()
    return out


FIRST_TURNS: set[str] = set()  # reply ids of first turns: nothing but the system prompt can be cached


async def converse(client: ParleyClient, turns: int, rng: random.Random, fresh_each_turn: bool) -> None:
    cid = await client.create_conversation()
    for t in range(turns):
        if fresh_each_turn and t:
            cid = await client.create_conversation()
        text = f"turn {t}: " + " ".join(rng.choice(["why", "how", "data", "plan", "code"]) for _ in range(30))
        reply = await client.send(cid, text)
        if t == 0:
            FIRST_TURNS.add(reply.head["reply_id"])
        await asyncio.sleep(rng.uniform(0.05, 0.3))  # think time, scaled down


async def drive(stack: isolated.IsolatedStack, conversations: int, fresh: bool, seed: int) -> None:
    _, key = stack.create_user("bench", "enterprise")
    client = ParleyClient(stack.url, key)
    rng = random.Random(seed)
    sizes = [min(12, int(rng.paretovariate(1.3)) + 1) for _ in range(conversations)]
    try:
        for start in range(0, conversations, 8):  # 8 conversations at a time
            await asyncio.gather(*(converse(client, n, random.Random(seed + i), fresh) for i, n in enumerate(sizes[start : start + 8], start)))
    finally:
        await client.close()


def hit_rate(records: list[UsageRecorded]) -> float:
    return sum(r.usage.cached_tokens for r in records) / max(1, sum(r.usage.prompt_tokens for r in records))


def run(conversations: int, fresh: bool, seed: int) -> tuple[float, float, int]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "benchrt")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), ENV, services=(CONTEXT, ROUTER, MATERIALIZER, GATEWAY))
        try:
            for i in range(3):
                isolated.add_worker(stack, WORKER_SMALL, f"bench-w{i}")
            time.sleep(3)  # heartbeats reach the router
            asyncio.run(drive(stack, conversations, fresh, seed))
            records = usage(kafka)
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)
    later = [r for r in records if r.request_id not in FIRST_TURNS]
    return hit_rate(records), hit_rate(later), len(records)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=48)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    parley_hit, parley_later, n = run(args.conversations, fresh=False, seed=args.seed)
    FIRST_TURNS.clear()
    fresh_hit, fresh_later, m = run(args.conversations, fresh=True, seed=args.seed)
    print(f"three synthetic engines on one pool, {args.conversations} conversations, {n} turns")
    print(f"parley placement:             hit rate {parley_hit:.3f} (turns after the first: {parley_later:.3f})")
    print(f"every turn a new conversation: hit rate {fresh_hit:.3f} (turns after the first: {fresh_later:.3f})")
    print(f"ratio {parley_hit / max(fresh_hit, 1e-9):.2f} (after the first turn: {parley_later / max(fresh_later, 1e-9):.2f})")


if __name__ == "__main__":
    main()
