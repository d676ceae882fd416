"""Experiments end to end: an arm made slower by a setting is reported slower, identical arms are not.

One isolated stack (tools/isolated.py) on the synthetic engine: the small pool's engine answers its first
token after ``--fast-ms`` (100 ms), and a medium pool worker fronts an engine of its own set to ``--slow-ms``
(400 ms, ``PARLEY_ENGINE_TTFT_MS``): the setting that makes one arm slower. Then, with the operator's CLI:

1. ``parley experiments start ttft-slow --arm control:0.5:pool=small --arm slow:0.5:pool=medium --tier free``;
   ``--users`` free users take ``--turns`` turns each, ``--concurrency`` at a time; ``parley experiments stop``;
2. ``parley experiments start ttft-same --arm control:0.5:pool=small --arm same:0.5:pool=small --tier free``;
   another ``--users`` free users the same way; stop;
3. ``parley replay`` of the run, then ``parley report --experiment`` for each: every arm's TTFT, the
   difference and its 95% interval, which must exclude zero for the slow arm (the bench exits 1 when it does
   not) and should cover it for the identical one (a 95% interval misses in about 1 run of 20: the bench says
   so then, without failing).

TTFT is the worker's (``UsageRecorded.ttft_ms``: engine submission to first token), as the report reads it;
the clients' own first-delta times per arm are printed beside it. Users rate half their replies (thumbs up
70% of the time, whatever the arm), so the thumbs up share is compared too, and should show no difference. It also checks that every turn of each
experiment carried an arm and that each arm's turns ran where the arm said.

Run: ``python -m bench.experiment [--users 40] [--turns 2] [--fast-ms 100] [--slow-ms 400]`` with Kafka and
Cassandra up (``make infra``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median

import httpx

from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.topology import ENGINE, GATEWAY, SERVICES, WORKER_MEDIUM, WORKER_SMALL, CONTEXT, ROUTER, MATERIALIZER, USAGE

#: What a chat turn needs and nothing else (no titles, moderation, tools, documents, erasure): two cores.
STACK = tuple(s for s in SERVICES if s in (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, MATERIALIZER, USAGE, GATEWAY))
TOKENS = 12
#: Users rate half their replies, thumbs up 70% of the time, in every arm alike: the report should find no
#: difference in the thumbs up share (the feedback path, FeedbackGiven → replay → report, end to end).
RATED, UP = 0.5, 0.7


def env(fast_ms: float) -> dict[str, str]:
    return {
        "PARLEY_ENGINE_BACKEND": "synthetic",
        "PARLEY_ENGINE_TTFT_MS": f"{fast_ms:g}",
        "PARLEY_ENGINE_TOKENS_PER_S": "100",
        "PARLEY_ENGINE_PREFIX_CACHE_TOKENS": "0",
        "PARLEY_CONTEXT_MAX_TOKENS": str(TOKENS),
        "PARLEY_CONTEXT_TOKENIZER": "words",  # the synthetic engine's
        "PARLEY_TITLER_ENGINE_URL": "",
    }


async def turn(http: httpx.AsyncClient, key: str, cid: str, n: int) -> tuple[str, float | None]:
    """One turn as raw SSE: (reply id, seconds to the first delta; None if it failed)."""
    body = {"content": f"Tell me about topic {n} {uuid.uuid4().hex[:6]}.", "client_message_id": uuid.uuid4().hex}
    began, event, reply, first = time.perf_counter(), "", "", None
    headers = {"Authorization": f"Bearer {key}"}
    async with http.stream("POST", f"/v1/conversations/{cid}/messages", json=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            return "", None
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "message":
                reply = json.loads(line[5:])["reply_id"]
            elif line.startswith("data:") and event == "delta" and first is None:
                first = time.perf_counter() - began
            elif line.startswith("data:") and event in ("done", "error"):
                return reply, first if event == "done" else None
    return reply, None


async def users_take_turns(url: str, keys: list[str], turns: int, concurrency: int) -> dict[str, float | None]:
    """Each user one conversation of ``turns`` turns in a row, ``concurrency`` users at a time: reply → client TTFT."""
    out: dict[str, float | None] = {}
    gate = asyncio.Semaphore(concurrency)
    rng = random.Random(len(keys))
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def user(key: str) -> None:
            async with gate:
                created = await http.post("/v1/conversations", json={}, headers={"Authorization": f"Bearer {key}"})
                cid = created.json()["id"]
                for n in range(turns):
                    reply, ttft = await turn(http, key, cid, n)
                    if reply:
                        out[reply] = ttft
                    if reply and ttft is not None and rng.random() < RATED:  # a thumb, whatever the arm
                        rating = "up" if rng.random() < UP else "down"
                        rated = await http.put(f"/v1/conversations/{cid}/messages/{reply}/feedback", json={"rating": rating},
                                               headers={"Authorization": f"Bearer {key}"})  # fmt: skip
                        assert rated.status_code < 300, rated.text

        await asyncio.gather(*(user(k) for k in keys))
    return out


def parley(args: list[str], kafka: KafkaSettings, cassandra: CassandraSettings) -> str:
    """The operator's and analyst's CLI on this stack's namespace; its stdout."""
    environ = {**os.environ, "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap, "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
               "PARLEY_KEYSPACE": cassandra.keyspace}  # fmt: skip
    done = subprocess.run([str(Path(sys.executable).parent / "parley"), *args], env=environ, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"parley {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def run_experiment(stack: isolated.IsolatedStack, name: str, arms: list[str], users: int, turns: int, concurrency: int) -> dict[str, float | None]:
    print(parley(["experiments", "start", name, *(f"--arm={a}" for a in arms), "--tier", "free", "--by", "bench"],
                 stack.kafka, stack.cassandra).strip(), flush=True)  # fmt: skip
    time.sleep(2.0)  # the gateway reads ops.experiments every half second
    keys = [stack.create_user(f"{name}-{i}", "free")[1] for i in range(users)]
    began = time.monotonic()
    seen = asyncio.run(users_take_turns(stack.url, keys, turns, concurrency))
    print(f"  {len(seen)} turns ({sum(v is None for v in seen.values())} failed) in {time.monotonic() - began:.1f} s", flush=True)
    print(parley(["experiments", "stop", name, "--by", "bench"], stack.kafka, stack.cassandra).strip(), flush=True)
    return seen


def check(records: list[dict], name: str, seen: dict[str, float | None], arm_pools: dict[str, str]) -> list[str]:
    """What must hold of the replayed turns: each carries the experiment, and ran in its arm's pool."""
    problems = []
    mine = {t["request_id"]: t for t in records if t["request_id"] in seen}
    if len(mine) != len(seen):
        problems.append(f"{name}: {len(seen) - len(mine)} turns missing from the replay")
    for t in mine.values():
        if t.get("experiment") != name:
            problems.append(f"{name}: turn {t['request_id']} carries experiment {t.get('experiment')!r}")
        elif t["pool"] != arm_pools[t["arm"]]:
            problems.append(f"{name}: arm {t['arm']} turn ran on {t['pool']}, not {arm_pools[t['arm']]}")
    clients: dict[str, list[float]] = {}
    for rid, ttft in seen.items():
        if ttft is not None and rid in mine:
            clients.setdefault(mine[rid]["arm"], []).append(ttft * 1000)
    print("  client TTFT (first delta) median by arm: " + ", ".join(f"{a} {median(v):.0f} ms (n={len(v)})" for a, v in sorted(clients.items())))
    return problems


def verdict_of(report_json: Path, arm: str) -> tuple[float, float, float]:
    r = json.loads(report_json.read_text())
    mean = next(m for m in r["metrics"] if m["name"] == "TTFT, mean")
    d = mean["differences"][arm]
    return d["estimate"], d["low"], d["high"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=40, help="free users per experiment")
    parser.add_argument("--turns", type=int, default=2, help="turns per user")
    parser.add_argument("--concurrency", type=int, default=8, help="users taking turns at once")
    parser.add_argument("--fast-ms", type=float, default=100.0, help="the small pool's engine TTFT (PARLEY_ENGINE_TTFT_MS)")
    parser.add_argument("--slow-ms", type=float, default=400.0, help="the medium pool's engine TTFT: the slow arm's setting")
    args = parser.parse_args()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "exp")
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs, out = Path(tmp) / "logs", Path(tmp)
        logs.mkdir()
        stack = isolated.start(kafka, cassandra, logs, env(args.fast_ms), services=STACK)
        try:
            isolated.add_worker(stack, WORKER_MEDIUM, "medium-slow", engine_env={"PARLEY_ENGINE_TTFT_MS": f"{args.slow_ms:g}"})
            print(f"small pool engine TTFT {args.fast_ms:g} ms, medium pool engine {args.slow_ms:g} ms; "
                  f"{args.users} free users × {args.turns} turns per experiment, {args.concurrency} at a time", flush=True)
            # Warm-up outside the experiments (a plus user: neither experiment takes plus turns): connections,
            # prepared statements and both engines' first requests, so neither arm pays for them.
            _, warm = stack.create_user("warm-up", "plus")
            asyncio.run(users_take_turns(stack.url, [warm] * 4, 2, 4))
            since = time.time() - 1
            slow = run_experiment(stack, "ttft-slow", ["control:0.5:pool=small", "slow:0.5:pool=medium"], args.users, args.turns, args.concurrency)
            same = run_experiment(stack, "ttft-same", ["control:0.5:pool=small", "same:0.5:pool=small"], args.users, args.turns, args.concurrency)
            turns_file = out / "turns.jsonl"
            parley(["replay", str(turns_file), "--since", str(int(since * 1000)), "--grace", "5"], kafka, cassandra)
            from tools.analysts import replay

            records = replay.load(turns_file, texts=False)
            failures += check(records, "ttft-slow", slow, {"control": "small", "slow": "medium"})
            failures += check(records, "ttft-same", same, {"control": "small", "same": "small"})
            for name, arm, differs in (("ttft-slow", "slow", True), ("ttft-same", "same", False)):
                print(parley(["report", str(turns_file), "--experiment", name, "--out", str(out / name)], kafka, cassandra), flush=True)
                est, low, high = verdict_of(out / name / "experiment.json", arm)
                excludes = not (low <= 0 <= high)
                print(f"{name}: TTFT mean difference {arm} − control {est:+.1f} ms, 95% CI [{low:+.1f}, {high:+.1f}] ms: "
                      f"{'excludes zero' if excludes else 'covers zero (no detectable difference)'}", flush=True)
                if differs and not excludes:
                    failures.append(f"{name}: the slow arm's interval covers zero")
                elif not differs and excludes:  # a 95% interval misses the truth in 1 run of 20: said, not failed
                    print(f"{name}: identical arms look different this run; at 95% that happens in about 1 run of 20 "
                          "(run again; it should not repeat)", flush=True)
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)
    if failures:
        print("FAILED: " + "; ".join(failures[:10]))
        raise SystemExit(1)
    print("ok: every turn carried its arm and ran where the arm said; the slow arm's TTFT difference excludes zero")


if __name__ == "__main__":
    main()
