"""Cost per turn as a conversation grows: turns 1–5 against turns 46–50 of the same conversations.

One run starts an isolated stack with every service of `make run` on a fast
synthetic engine (10 ms to the first token, 1,000 tokens/s: the engine is not
what is measured), and takes C conversations (8) through N turns (50) in
lockstep: every conversation posts its turn t, reads its reply to the end, then
all go on to t + 1. Each turn's message is ~60 words and its reply 64 tokens,
so by turn 50 a conversation holds 100 messages and ~6,000 words. Per window of
five rounds it prints each process's CPU milliseconds per turn
(``/proc/<pid>/stat``; Kafka and Cassandra counted apart) and the TTFT p50, the
first window beside the last: the baseline is the same conversations, young.
The target (issue 37): Parley's per-turn CPU at turn 50 within 1.2× of turn 1.

Run: `python -m bench.turn_cost [--conversations 8] [--turns 50]` with Kafka and Cassandra up (`make setup`).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from pathlib import Path

import httpx

from bench.load import Step, _sse_turn, cpu_now, pct, processes
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated

WINDOW = 5
REPLY_TOKENS = 64
WORDS = ("river", "lantern", "orbit", "granite", "meadow", "cipher", "harbor", "violet", "summit", "echo")


def env() -> dict[str, str]:
    return {
        "PARLEY_ENGINE_BACKEND": "synthetic",
        "PARLEY_ENGINE_TTFT_MS": "10",
        "PARLEY_ENGINE_TOKENS_PER_S": "1000",
        "PARLEY_CONTEXT_TOKENIZER": "words",  # the synthetic engine's
    }


def message(turn: int) -> str:
    words = [WORDS[(turn * 7 + i * 3) % len(WORDS)] for i in range(58)]
    return f"Turn {turn}: " + " ".join(words) + f" {uuid.uuid4().hex[:8]}."


async def run(url: str, key: str, conversations: int, turns: int, pids: dict[str, int]) -> list[tuple[Step, dict[str, float]]]:
    """Per window of WINDOW rounds: its turns (TTFTs, counts) and each process's CPU seconds."""
    headers = {"Authorization": f"Bearer {key}"}
    windows: list[tuple[Step, dict[str, float]]] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
        cids = [(await http.post("/v1/conversations", json={})).json()["id"] for _ in range(conversations)]
        for start in range(1, turns + 1, WINDOW):
            step, before = Step(), cpu_now(pids)
            for turn in range(start, min(start + WINDOW, turns + 1)):
                await asyncio.gather(*(_turn(http, cid, turn, step) for cid in cids))
            after = cpu_now(pids)
            windows.append((step, {name: after[name] - before[name] for name in pids}))
    return windows


async def _turn(http: httpx.AsyncClient, cid: str, turn: int, step: Step) -> None:
    body = {"content": message(turn), "client_message_id": uuid.uuid4().hex, "max_tokens": REPLY_TOKENS}
    await _sse_turn(http, cid, step, body=body)


def report(windows: list[tuple[Step, dict[str, float]]]) -> None:
    (first, first_cpu), (last, last_cpu) = windows[0], windows[-1]
    print(f"  {'CPU ms per turn':34} {'turns 1-5':>10} {'last 5':>10} {'ratio':>7}")
    names = sorted(first_cpu, key=lambda n: -last_cpu[n])
    for name in names:
        a, b = first_cpu[name] * 1000 / max(first.turns, 1), last_cpu[name] * 1000 / max(last.turns, 1)
        print(f"  {name:34} {a:10.1f} {b:10.1f} {b / a if a else float('nan'):6.2f}x")
    ours = [n for n in names if "(shared)" not in n and "generator" not in n]
    a = sum(first_cpu[n] for n in ours) * 1000 / max(first.turns, 1)
    b = sum(last_cpu[n] for n in ours) * 1000 / max(last.turns, 1)
    print(f"  {'Parley (its processes, engine included)':34} {a:10.1f} {b:10.1f} {b / a if a else float('nan'):6.2f}x   target ≤ 1.20x")
    print(f"  {'TTFT p50 (ms)':34} {pct(first.ttfts, 0.5) * 1000:10.0f} {pct(last.ttfts, 0.5) * 1000:10.0f}")
    print(f"  {'turns done / failed':34} {first.turns:>5}/{first.failed:<4} {last.turns:>5}/{last.failed:<4}")
    print("  per window (turns, Parley CPU ms per turn, TTFT p50 ms): " + "; ".join(
        f"{i * WINDOW + 1}-{i * WINDOW + WINDOW}: {sum(c[n] for n in ours) * 1000 / max(s.turns, 1):.0f}, "
        f"{pct(s.ttfts, 0.5) * 1000:.0f}"
        for i, (s, c) in enumerate(windows)
    ))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "turncost")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), env())
        try:
            _, key = stack.create_user("turn-cost", "enterprise")
            pids = processes(stack)
            print(f"{args.conversations} conversations × {args.turns} turns in lockstep, ~60-word messages, "
                  f"{REPLY_TOKENS}-token replies")
            report(asyncio.run(run(stack.url, key, args.conversations, args.turns, pids)))
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
