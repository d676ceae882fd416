"""Read amplification across gateways: records of chat.tokens each gateway reads per token it streams.

Every gateway assigns itself the chat.tokens partitions its live streams are on.
Clients spread over N gateways by a plain load balancer put every gateway's
streams on nearly every partition, so every gateway reads nearly the whole
topic: read traffic grows as N × the token rate. Sharded gateways behind the
edge (PARLEY_GATEWAY_SHARD, edge/) each read their own share instead.

One stack (tools/isolated.py, bench.load's synthetic engine at 30 tokens/s)
without a gateway of its own; for N = 1, 2, 4 it starts N gateways and runs the
same load — K conversations of two turns, raw SSE clients — twice:

- ``round-robin``: N unsharded gateways, conversation i's client talking to
  gateway i mod N (what a plain load balancer does): today's amplification;
- ``edge``: N sharded gateways (i/N) behind ``python -m edge``, every request
  through it (conversations created there are minted on their creator's
  partitions, their turns routed back to it).

Per run: records the gateways read (``parley_gateway_token_records_read_total``
from each gateway's /metrics, owned + borrowed) per streamed token (the
``completion_tokens`` of each ``done``), beside the records written to
chat.tokens meanwhile per token (what one reader of every stream would read:
the floor), their ratio (the amplification: 1.0 is none), client TTFT p50/p99,
and the CPU seconds per 1,000 streamed tokens of the gateways together and of
the edge (``/proc/<pid>/stat``).

Run: `python -m bench.gateways [--gateways 1,2,4] [--k 60] [--tokens 128]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from confluent_kafka import TopicPartition

from bench.load import Step, _sse_turn, cpu_seconds, env, pct
from parley.consumer import reader, watermarks
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas.catalog import TOPICS
from tools import isolated
from tools.supervisor import Child
from tools.topology import GATEWAY, SERVICES

READ = "parley_gateway_token_records_read_total"


@dataclass
class Result:
    mode: str
    gateways: int
    step: Step
    read: float  # records the gateways read
    borrowed: float  # of which on partitions the reading gateway does not own
    written: int  # records appended to chat.tokens meanwhile
    gateway_cpu: float
    edge_cpu: float

    def per_token(self, records: float) -> float:
        return records / self.step.tokens if self.step.tokens else float("nan")


def records_read(gateway: Child) -> tuple[float, float]:
    """(all, borrowed) token records a gateway has read, from its /metrics (on its metrics port)."""
    total = borrowed = 0.0
    for line in httpx.get(str(gateway.metrics_url), timeout=10).text.splitlines():
        if line.startswith(READ + "{"):
            value = float(line.rsplit(" ", 1)[1])
            total += value
            borrowed += value if 'share="borrowed"' in line else 0.0
    return total, borrowed


def token_log_end(kafka: KafkaSettings) -> int:
    """The sum of chat.tokens' end offsets: records written so far."""
    consumer = reader(kafka, "bench-gateways")
    try:
        topic = kafka.topic("chat.tokens")
        return sum(
            watermarks(consumer, TopicPartition(topic, p), 10)[1]
            for p in range(TOPICS["chat.tokens"].partitions)
        )
    finally:
        consumer.close()


async def conversations(urls: list[str], key: str, k: int, turns: int = 2) -> Step:
    """K conversations of ``turns`` turns; conversation i created on and talking to ``urls[i % len(urls)]``."""
    step = Step()
    limits = httpx.Limits(max_connections=k + 8, max_keepalive_connections=k + 8)
    headers = {"Authorization": f"Bearer {key}"}
    clients = [httpx.AsyncClient(base_url=u, headers=headers, limits=limits, timeout=120) for u in urls]
    try:
        pairs = []
        for i in range(k):
            http = clients[i % len(clients)]
            created = await http.post("/v1/conversations", json={})
            created.raise_for_status()
            pairs.append((http, created.json()["id"]))

        async def conversation(http: httpx.AsyncClient, cid: str) -> None:
            for _ in range(turns):
                await _sse_turn(http, cid, step)

        began = time.perf_counter()
        await asyncio.gather(*(conversation(h, c) for h, c in pairs))
        step.seconds = time.perf_counter() - began
    finally:
        for c in clients:
            await c.aclose()
    return step


def run_one(stack: isolated.IsolatedStack, key: str, mode: str, n: int, k: int) -> Result:
    tag = f"{mode}-{n}-{uuid.uuid4().hex[:4]}"
    children: list[Child] = []
    try:
        urls = []
        for i in range(n):
            child, url = isolated.add_gateway(stack, f"gw-{tag}-{i}", f"{i}/{n}" if mode == "edge" else "")
            children.append(child)
            urls.append(url)
        edge: Child | None = None
        entry = urls
        if mode == "edge":
            edge, edge_url = isolated.add_edge(stack, urls, name=f"edge-{tag}")
            children.append(edge)
            entry = [edge_url]
        asyncio.run(conversations(entry if mode == "edge" else urls, key, 2 * n, turns=1))  # warm-up: every gateway

        gateways = [c for c in children if c is not edge]
        before = [records_read(g) for g in gateways]
        written = token_log_end(stack.kafka)
        cpu = sum(cpu_seconds(c.process.pid) for c in gateways), cpu_seconds(edge.process.pid) if edge else 0.0
        step = asyncio.run(conversations(entry, key, k))
        time.sleep(0.5)  # the readers finish the records behind the last chunk
        after = [records_read(g) for g in gateways]
        cpu_after = sum(cpu_seconds(c.process.pid) for c in gateways), cpu_seconds(edge.process.pid) if edge else 0.0
        return Result(
            mode,
            n,
            step,
            read=sum(a[0] - b[0] for a, b in zip(after, before)),
            borrowed=sum(a[1] - b[1] for a, b in zip(after, before)),
            written=token_log_end(stack.kafka) - written,
            gateway_cpu=cpu_after[0] - cpu[0],
            edge_cpu=cpu_after[1] - cpu[1],
        )
    finally:
        for child in reversed(children):
            stack.supervisor.stop(child)
            stack.supervisor.children.remove(child)


def report(r: Result) -> None:
    per_k = 1000.0 / r.step.tokens if r.step.tokens else 0.0
    amplification = r.read / r.written if r.written else float("nan")
    print(
        f"{r.mode:<11s} N={r.gateways}  records read/token {r.per_token(r.read):5.2f} "
        f"(written/token {r.per_token(r.written):4.2f}, read/written x{amplification:4.2f}, borrowed {r.borrowed:.0f})  "
        f"TTFT p50 {pct(r.step.ttfts, 0.5) * 1000:5.0f} ms p99 {pct(r.step.ttfts, 0.99) * 1000:5.0f} ms  "
        f"CPU s/1k tokens: gateways {r.gateway_cpu * per_k:4.2f}, edge {r.edge_cpu * per_k:4.2f}  "
        f"turns {r.step.turns} failed {r.step.failed}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gateways", default="1,2,4", help="gateway counts, comma-separated")
    parser.add_argument("--k", type=int, default=60, help="concurrent conversations (two turns each)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per reply")
    parser.add_argument("--modes", default="round-robin,edge", help="round-robin, edge or both")
    args = parser.parse_args()
    counts = [int(n) for n in args.gateways.split(",")]
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "gateways")
    services = tuple(s for s in SERVICES if s is not GATEWAY)
    extra = {"PARLEY_GATEWAY_DRAIN_S": "1"}
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), env(args.tokens, None) | extra, services=services)
        try:
            _, key = stack.create_user("gateways", "enterprise")  # no quota, never shed
            print(f"K={args.k} conversations × 2 turns, {args.tokens} tokens per reply at 30 tokens/s; "
                  f"chat.tokens has {TOPICS['chat.tokens'].partitions} partitions")
            for n in counts:
                for mode in args.modes.split(","):
                    report(run_one(stack, key, mode, n, args.k))
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
