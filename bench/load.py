"""Load: K concurrent conversations through the whole stack, ramping K, against the engine alone at the same K.

One run starts an isolated stack (tools/isolated.py) on the synthetic engine
at a chat model's pace (100 ms TTFT, 30 tokens/s per stream, a batch of 512,
workers taking 256 at once). For each K it first streams K conversations
straight from the engine over SGLang's API (the baseline: what the engine
alone gives at this concurrency), then K conversations of two turns each
through gateway → Kafka → processors → worker → engine → Kafka → gateway →
SSE, with raw HTTP clients (httpx and a dozen lines of SSE parsing, not the
project's client). Per step it prints completed turns/s, client TTFT p50/p99
and inter-delta p99 beside the engine's, and the CPU seconds each process
spent per 1,000 streamed tokens (``/proc/<pid>/stat`` of the stack's
processes, and of the shared Kafka and Cassandra), so every hop's cost is a
number. The knee is the largest K whose TTFT p99 stays under 1 s and
inter-delta p99 under 150 ms.

``--overload`` runs admission instead: one worker of 8 slots (1 queued, beats
every 0.5 s), a few paid (enterprise) conversations taking turns back to back,
first alone (the baseline), then beside many free ones that want several times
the pool's capacity and retry 2 s after being shed; then the same overload on a
second stack whose router does not read the backlog
(``PARLEY_ROUTER_BACKLOG_EVERY_S=0``: heartbeats alone, as before issue 34). It
prints each tier's TTFT p50/p99, turns served and shed, the paid turns' first
token by hop, and whether the paid TTFT p99 stayed under the 1 s bar while free
turns were shed. ``--queue-limit`` below 1 sheds free turns before every slot
is taken, so a paid turn finds one free instead of waiting for one to finish.

``--profile DIR`` attaches py-spy to every process of the stack during each step and prints, per process,
which of Parley's functions its CPU is spent under and which libraries ran (bench/profile.py).

Run: `python -m bench.load [--steps 10,25,50,100] [--tokens 128] [--coalesce-ms MS] [--profile DIR]` with Kafka and Cassandra up (`make infra`);
`python -m bench.load --overload [--paid 4] [--free 24] [--seconds 45] [--tokens 256] [--queue-limit 0.5]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from confluent_kafka import TopicPartition

from infra.local import stack as infra_stack
from infra.local.settings import LocalInfraSettings
from parley import keys
from parley.consumer import reader, records_since
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import GenerationRequested, InferenceRequested, InferenceRouted, TokenChunk
from bench import profile
from tools import isolated

TTFT_BAR_S = 1.0
GAP_BAR_S = 0.150
TICK = os.sysconf("SC_CLK_TCK")


def env(tokens: int, coalesce_ms: float | None) -> dict[str, str]:
    extra = {} if coalesce_ms is None else {"PARLEY_WORKER_COALESCE_MS": f"{coalesce_ms:g}"}
    return extra | {
        "PARLEY_ENGINE_BACKEND": "synthetic",
        "PARLEY_ENGINE_TTFT_MS": "100",
        "PARLEY_ENGINE_TOKENS_PER_S": "30",
        "PARLEY_ENGINE_MAX_BATCH": "512",
        "PARLEY_ENGINE_MAX_TOTAL_TOKENS": "1000000",
        "PARLEY_ENGINE_PREFIX_CACHE_TOKENS": "0",
        "PARLEY_WORKER_MAX_CONCURRENCY": "256",
        "PARLEY_WORKER_MAX_QUEUED": "64",
        "PARLEY_CONTEXT_MAX_TOKENS": str(tokens),
        "PARLEY_CONTEXT_TOKENIZER": "words",  # the synthetic engine's
        "PARLEY_TITLER_ENGINE_URL": "",  # titles are not the hot path
    }


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Step:
    ttfts: list[float] = field(default_factory=list)
    #: reply id → (wall time the POST began, wall time its first delta arrived), for the hop breakdown.
    walls: dict[str, tuple[float, float]] = field(default_factory=dict)
    gaps: list[float] = field(default_factory=list)
    turns: int = 0
    tokens: int = 0
    failed: int = 0
    shed: int = 0  # refused as overloaded: 503 before appending, or an `overloaded` error event
    seconds: float = 0.0


# ------------------------------------------------------------------ the two paths


async def _sse_turn(
    http: httpx.AsyncClient, cid: str, step: Step, headers: dict[str, str] | None = None, body: dict[str, object] | None = None
) -> None:
    """One turn through the stack, read as raw Server-Sent Events (``body``: the message; a short question if None)."""
    body = body or {"content": f"Tell me about {uuid.uuid4().hex[:8]} in detail.", "client_message_id": uuid.uuid4().hex}
    began, began_wall = time.perf_counter(), time.time()
    last: float | None = None
    event, reply_id = "", ""
    async with http.stream("POST", f"/v1/conversations/{cid}/messages", json=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            if response.status_code == 503 and response.json().get("error", {}).get("code") == "overloaded":
                step.shed += 1
            else:
                step.failed += 1
            return
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "message":
                reply_id = json.loads(line[5:])["reply_id"]
            elif line.startswith("data:") and event == "delta":
                now = time.perf_counter()
                if last is None:
                    step.ttfts.append(now - began)
                    step.walls[reply_id] = (began_wall, time.time())
                else:
                    step.gaps.append(now - last)
                last = now
            elif line.startswith("data:") and event in ("done", "error"):
                if event == "done":
                    step.turns += 1
                    step.tokens += int(json.loads(line[5:])["usage"]["completion_tokens"])
                elif json.loads(line[5:]).get("code") == "overloaded":
                    step.shed += 1
                else:
                    step.failed += 1
                return


async def _engine_turn(http: httpx.AsyncClient, tokens: int, step: Step, incremental: bool) -> None:
    """One generation straight from the engine's /generate stream (the baseline). ``incremental``: each
    event carries only its own text (the engine's /get_server_info says), else the whole text so far."""
    body = {
        "text": f"Tell me about {uuid.uuid4().hex[:8]} in detail.",
        "sampling_params": {"max_new_tokens": tokens},
        "stream": True,
        "rid": uuid.uuid4().hex,
    }
    began = time.perf_counter()
    last: float | None = None
    seen = ""
    async with http.stream("POST", "/generate", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            out = json.loads(line[5:])
            text = out.get("text", "")
            if len(text) > (0 if incremental else len(seen)):
                now = time.perf_counter()
                if last is None:
                    step.ttfts.append(now - began)
                else:
                    step.gaps.append(now - last)
                last, seen = now, seen + text if incremental else text
            if out.get("meta_info", {}).get("finish_reason"):
                step.turns += 1
                step.tokens += int(out["meta_info"].get("completion_tokens", 0))
                return


async def through_stack(url: str, key: str, k: int) -> Step:
    step = Step()
    limits = httpx.Limits(max_connections=k + 8, max_keepalive_connections=k + 8)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as http:
        cids = [(await http.post("/v1/conversations", json={})).json()["id"] for _ in range(k)]

        async def conversation(cid: str) -> None:
            for _ in range(2):
                await _sse_turn(http, cid, step)

        began = time.perf_counter()
        await asyncio.gather(*(conversation(c) for c in cids))
        step.seconds = time.perf_counter() - began
    return step


async def straight_to_engine(url: str, k: int, tokens: int) -> Step:
    step = Step()
    limits = httpx.Limits(max_connections=k + 8, max_keepalive_connections=k + 8)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as http:
        incremental = bool((await http.get("/get_server_info")).json().get("incremental_streaming_output", False))

        async def conversation() -> None:
            for _ in range(2):
                await _engine_turn(http, tokens, step, incremental)

        began = time.perf_counter()
        await asyncio.gather(*(conversation() for _ in range(k)))
        step.seconds = time.perf_counter() - began
    return step


# ------------------------------------------------------------------ where the first token's time goes

#: The hops of a turn's first token, each from one timestamp to the next (all wall clock, one machine).
HOPS = (
    "gateway: POST → GenerationRequested",
    "context: → InferenceRequested",
    "router: → InferenceRouted",
    "worker + engine: → first TokenChunk",
    "gateway: → first SSE delta",
)


def first_token_hops(kafka: KafkaSettings, step: Step, since_s: float) -> dict[str, list[float]]:
    """Per hop, its seconds for every turn of ``step``, from the events' own ``occurred_at`` on the log."""
    names = ["chat.events", "chat.inference", "chat.tokens", *(f"chat.inference.{p}" for p in ("small", "medium", "frontier"))]
    starts = [
        TopicPartition(kafka.topic(n), p, int(since_s * 1000)) for n in names for p in range(TOPICS[n].partitions)
    ]
    at: dict[str, dict[type, float]] = {rid: {} for rid in step.walls}
    consumer = reader(kafka, "bench-load")
    try:
        for msg in records_since(consumer, starts, 60.0):
            event = codec.decode(msg.value())
            rid = getattr(event, "request_id", None) or getattr(getattr(event, "request", None), "request_id", None)
            if rid not in at or (isinstance(event, TokenChunk) and (event.seq != 0 or event.attempt != 0)):
                continue
            if isinstance(event, (GenerationRequested, InferenceRequested, InferenceRouted, TokenChunk)):
                at[rid].setdefault(type(event), event.occurred_at / 1e6)
    finally:
        consumer.close()
    out: dict[str, list[float]] = {hop: [] for hop in HOPS}
    order = (GenerationRequested, InferenceRequested, InferenceRouted, TokenChunk)
    for rid, (posted, delivered) in step.walls.items():
        times = at[rid]
        if not all(kind in times for kind in order):
            continue
        marks = [posted, *(times[kind] for kind in order), delivered]
        for hop, (a, b) in zip(HOPS, zip(marks, marks[1:])):
            out[hop].append(b - a)
    return out


def install_keys(cassandra: CassandraSettings) -> None:
    """Let this process open what the stack sealed (the hops read its events): its data keys, in its keyspace
    unless the environment names a shared one; the variable is restored, so a later stack starts clean."""
    saved = os.environ.get("PARLEY_KEYS_KEYSPACE")
    os.environ["PARLEY_KEYS_KEYSPACE"] = saved or cassandra.keyspace
    try:
        keys.install_from_env()
    finally:
        if saved is None:
            del os.environ["PARLEY_KEYS_KEYSPACE"]


def report_hops(hops: dict[str, list[float]]) -> None:
    ms = 1000.0
    print("        first token, by hop (p50 / p99 ms): " + "; ".join(
        f"{hop} {pct(v, 0.5) * ms:.0f} / {pct(v, 0.99) * ms:.0f}" for hop, v in hops.items()
    ))


# ------------------------------------------------------------------ CPU per process


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` so far (its threads included), in seconds; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # fields 14 and 15 of stat(5), after pid and comm


def processes(stack: isolated.IsolatedStack) -> dict[str, int]:
    """The stack's processes by name, and the shared Kafka and Cassandra (not started here, but on the path)."""
    out = {c.log.stem: c.process.pid for c in stack.supervisor.children}
    out["load generator (this process)"] = os.getpid()  # its clients share the cores: counted, not hidden
    for state in infra_stack.status(from_env(LocalInfraSettings)):
        if state.pid:
            out[f"{state.name} (shared)"] = state.pid
    return out


def cpu_now(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


# ------------------------------------------------------------------ the run


def report(k: int, engine: Step, parley: Step, cpu: dict[str, float]) -> None:
    ms = 1000.0
    rate = parley.turns / parley.seconds if parley.seconds else 0.0
    print(
        f"K={k:<4d} turns/s {rate:6.2f} (engine {engine.turns / engine.seconds if engine.seconds else 0:6.2f})   "
        f"TTFT p50 {pct(parley.ttfts, 0.5) * ms:6.0f} ms (engine {pct(engine.ttfts, 0.5) * ms:5.0f}, "
        f"x{pct(parley.ttfts, 0.5) / pct(engine.ttfts, 0.5):4.1f})   "
        f"p99 {pct(parley.ttfts, 0.99) * ms:6.0f} ms (engine {pct(engine.ttfts, 0.99) * ms:5.0f})   "
        f"inter-delta p99 {pct(parley.gaps, 0.99) * ms:5.0f} ms (engine {pct(engine.gaps, 0.99) * ms:4.0f})   "
        f"failed {parley.failed}",
        flush=True,
    )
    per_k = 1000.0 / parley.tokens if parley.tokens else 0.0
    busiest = sorted(cpu.items(), key=lambda kv: -kv[1])
    print("        CPU s per 1,000 streamed tokens: " + ", ".join(f"{n} {s * per_k:.2f}" for n, s in busiest if s > 0))


def knee(results: Iterable[tuple[int, Step]]) -> int | None:
    ok = [k for k, s in results if pct(s.ttfts, 0.99) < TTFT_BAR_S and pct(s.gaps, 0.99) < GAP_BAR_S and not s.failed]
    return max(ok) if ok else None


# ------------------------------------------------------------------ overload: the paid tier's bound, free turns shed

#: A shed free client tries again this soon (not after its Retry-After): the overload does not let up.
SHED_PAUSE_S = 2.0


def overload_env(tokens: int) -> dict[str, str]:
    return env(tokens, None) | {
        # The pool's capacity: one worker, 8 slots and 1 queued (the defaults' ratio, 32 + 4), beating every
        # 0.5 s. Admission: the defaults (free shed from pressure 1.25, paid beyond 2.0).
        "PARLEY_WORKER_MAX_CONCURRENCY": "8",
        "PARLEY_WORKER_MAX_QUEUED": "1",
        "PARLEY_WORKER_HEARTBEAT_S": "0.5",
        "PARLEY_QUOTA_FREE_REQUESTS_PER_MINUTE": "1000000",  # quotas are not what is measured
        "PARLEY_QUOTA_FREE_TOKENS_PER_DAY": "1000000000",
    }


async def tiers(url: str, keys: dict[str, str], clients: dict[str, int], seconds: float) -> dict[str, Step]:
    """``clients[tier]`` conversations of each tier taking turns back to back for ``seconds``."""
    steps = {tier: Step() for tier in clients}
    total = sum(clients.values())
    limits = httpx.Limits(max_connections=total + 8, max_keepalive_connections=total + 8)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as http:

        async def conversation(tier: str) -> None:
            headers = {"Authorization": f"Bearer {keys[tier]}"}
            cid = (await http.post("/v1/conversations", json={}, headers=headers)).json()["id"]
            step = steps[tier]
            while time.perf_counter() < deadline:
                shed = step.shed
                try:
                    await _sse_turn(http, cid, step, headers)
                except httpx.TransportError:  # a connection dropped under the load: counted, not fatal
                    step.failed += 1
                if step.shed > shed:
                    await asyncio.sleep(SHED_PAUSE_S)

        began = time.perf_counter()
        deadline = began + seconds
        await asyncio.gather(*(conversation(tier) for tier, n in clients.items() for _ in range(n)))
        for step in steps.values():
            step.seconds = time.perf_counter() - began
    return steps


def report_tier(label: str, step: Step) -> None:
    ms = 1000.0
    print(
        f"  {label:<28s} TTFT p50 {pct(step.ttfts, 0.5) * ms:6.0f} ms  p99 {pct(step.ttfts, 0.99) * ms:6.0f} ms   "
        f"turns {step.turns:4d} ({step.turns / step.seconds if step.seconds else 0:5.2f}/s)   shed {step.shed:4d}   "
        f"failed {step.failed}",
        flush=True,
    )


def overload(paid: int, free: int, seconds: float, tokens: int, queue_limit: float | None) -> None:
    turn_s = 0.1 + tokens / 30
    limits = {} if queue_limit is None else {
        "PARLEY_ROUTER_BUSY": f"{min(0.8, queue_limit):g}", "PARLEY_ROUTER_QUEUE_LIMIT": f"{queue_limit:g}"
    }
    print(f"{tokens} tokens per reply at 30 tokens/s (a turn ≈ {turn_s:.1f} s); one worker of 8 slots; {paid} paid "
          f"conversations alone, then beside {free} free ones that alone want {free / 8:.1f} × the pool's capacity "
          f"(shed: retried after {SHED_PAUSE_S:g} s), {seconds:g} s each; free turns shed from pressure "
          f"{queue_limit or 1.25:g}, paid beyond 2; bar: paid TTFT p99 < {TTFT_BAR_S:g} s", flush=True)
    results = {}
    for label, extra in (
        ("the router reading the backlog", {}),
        ("heartbeats alone (BACKLOG_EVERY_S=0)", {"PARLEY_ROUTER_BACKLOG_EVERY_S": "0"}),
    ):
        kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "load")
        with tempfile.TemporaryDirectory() as logs:
            stack = isolated.start(kafka, cassandra, Path(logs), overload_env(tokens) | limits | extra)
            try:
                install_keys(cassandra)
                keys = {tier: stack.create_user(f"load-{tier}", tier)[1] for tier in ("enterprise", "free")}
                asyncio.run(through_stack(stack.url, keys["enterprise"], 2))  # warm-up
                print(label, flush=True)
                if not results:  # the baseline, once: paid turns with nothing else running
                    alone = asyncio.run(tiers(stack.url, keys, {"enterprise": paid}, seconds))["enterprise"]
                    report_tier("paid alone (baseline)", alone)
                since = time.time() - 1
                both = asyncio.run(tiers(stack.url, keys, {"enterprise": paid, "free": free}, seconds))
                report_tier("paid, free overloading", both["enterprise"])
                report_hops(first_token_hops(kafka, both["enterprise"], since))
                report_tier("free, overloading", both["free"])
                results[label] = both
            finally:
                stack.stop()
                isolated.drop(kafka, cassandra)
    print(f"paid TTFT p99: {pct(alone.ttfts, 0.99) * 1000:.0f} ms alone; " + "; ".join(
        f"{pct(r['enterprise'].ttfts, 0.99) * 1000:.0f} ms at overload with {label} "
        f"({'under' if pct(r['enterprise'].ttfts, 0.99) < TTFT_BAR_S else 'OVER'} the bar, "
        f"free shed {r['free'].shed} of {r['free'].shed + r['free'].turns})"
        for label, r in results.items()
    ), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="10,25,50,100", help="concurrent conversations per step, comma-separated")
    parser.add_argument("--tokens", type=int, default=None, help="tokens per reply (128; 256 with --overload)")
    parser.add_argument("--coalesce-ms", type=float, default=None, help="PARLEY_WORKER_COALESCE_MS (default: the setting's)")
    parser.add_argument("--overload", action="store_true", help="admission at overload: paid TTFT, free turns shed")
    parser.add_argument("--paid", type=int, default=4, help="--overload: paid conversations")
    parser.add_argument("--free", type=int, default=24, help="--overload: free conversations")
    parser.add_argument("--seconds", type=float, default=45.0, help="--overload: seconds per phase")
    parser.add_argument(
        "--queue-limit", type=float, default=None,
        help="--overload: PARLEY_ROUTER_QUEUE_LIMIT (and BUSY at most 0.8): below 1 keeps slots free for paid turns",
    )
    parser.add_argument(
        "--profile", type=Path, default=None, metavar="DIR",
        help="py-spy on every Parley process during each step (bench/profile.py); raw stacks kept in DIR/K<k>",
    )
    args = parser.parse_args()
    if args.overload:
        overload(args.paid, args.free, args.seconds, args.tokens or 256, args.queue_limit)
        return
    steps = [int(s) for s in args.steps.split(",")]
    args.tokens = args.tokens or 128
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "load")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), env(args.tokens, args.coalesce_ms))
        try:
            install_keys(cassandra)
            _, key = stack.create_user("load", "enterprise")  # no quota, never shed
            pids = processes(stack)
            ours = {c.log.stem for c in stack.supervisor.children}  # Parley's processes (and the engine), not the shared ones
            asyncio.run(through_stack(stack.url, key, 2))  # warm-up: connections, prepared statements
            print(f"{args.tokens} tokens per reply at 30 tokens/s, 2 turns per conversation; bars: TTFT p99 < 1 s, "
                  f"inter-delta p99 < 150 ms")
            results = []
            for k in steps:
                engine = asyncio.run(straight_to_engine(stack.engine_url, k, args.tokens))
                sampled = {n: p for n, p in pids.items() if n in ours}
                with profile.sampling(sampled, args.profile / f"K{k}") if args.profile else nullcontext({}) as files:
                    before, since = cpu_now(pids), time.time() - 1
                    parley = asyncio.run(through_stack(stack.url, key, k))
                    after = cpu_now(pids)
                report(k, engine, parley, {n: after[n] - before[n] for n in pids})
                report_hops(first_token_hops(kafka, parley, since))
                if files:
                    print("        where each process's CPU goes (py-spy, its own cost included above):")
                    profile.report(dict(sorted(files.items(), key=lambda kv: -(after[kv[0]] - before[kv[0]]))))
                results.append((k, parley))
            found = knee(results)
            print(f"knee: {'none of the steps' if found is None else f'K={found}'} meets both bars")
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
