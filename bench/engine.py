"""CPU engine speed with its default model (SmolLM2-135M-Instruct): TTFT and per-stream decode rate.

Starts ``python -m workers.engine`` (the torch backend, the packaged model, as
``make run`` does) on a free port and drives its real HTTP API: ``/generate``
streamed, prompts rendered by the worker's chat template, ``ignore_eos`` so
every reply is ``--tokens`` long. At 1, 4 and 16 concurrent streams it
measures each stream's TTFT (request sent → first token) and decode rate
(tokens after the first / time after the first). Rounds of the three levels
are interleaved, so a noisy machine slows them alike; the 1-stream figures are
the baseline of the 4- and 16-stream ratios, and every level is printed
against the seed's bar: TTFT p50 under 1 s, at least 30 tokens/s per stream.

Run: `python -m bench.engine [--rounds N] [--tokens T]` (no Kafka or Cassandra needed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from schemas.events import PromptMessage
from workers.chat_template import CHATML
from workers.engine.torch_model import torch_threads, usable_cpus
from tools.supervisor import free_port

REPO = Path(__file__).resolve().parents[1]
LEVELS = (1, 4, 16)
BAR_TTFT_S = 1.0
BAR_TOKENS_PER_S = 30.0
TOPICS = ("rain", "bread", "the moon", "bicycles", "volcanoes", "libraries", "tea", "bridges",
          "owls", "glass", "maps", "chess", "rivers", "clocks", "bees", "salt")


@dataclass(frozen=True)
class Stream:
    ttft_s: float
    decode_tokens_per_s: float
    tokens: int



def prompt(i: int) -> str:
    messages = [
        PromptMessage(role="system", content="You are a helpful assistant."),  # the context builder's default
        PromptMessage(role="user", content=f"Tell me about {TOPICS[i % len(TOPICS)]}."),
    ]
    return CHATML.render_prompt(messages)


async def one_stream(http: httpx.AsyncClient, text: str, tokens: int) -> Stream:
    body = {
        "text": text,
        "stream": True,
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0.7, "ignore_eos": True},
    }
    began = time.perf_counter()
    first_at = last_at = None
    first_n = last_n = 0
    async with http.stream("POST", "/generate", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            n = json.loads(line[6:])["meta_info"]["completion_tokens"]  # a total in either stream form
            now = time.perf_counter()
            if first_at is None and n > 0:
                first_at, first_n = now, n
            last_at, last_n = now, n
    assert first_at is not None and last_at is not None, "no token came back"
    decode_s = last_at - first_at
    rate = (last_n - first_n) / decode_s if decode_s > 0 else float("nan")
    return Stream(first_at - began, rate, last_n)


@dataclass
class Level:
    streams: list[Stream] = field(default_factory=list)
    tokens: int = 0
    wall_s: float = 0.0  # of its rounds: tokens / wall_s is the engine's aggregate rate


async def one_round(http: httpx.AsyncClient, streams: int, tokens: int, offset: int) -> tuple[list[Stream], float]:
    began = time.perf_counter()
    done = await asyncio.gather(*(one_stream(http, prompt(offset + i), tokens) for i in range(streams)))
    return list(done), time.perf_counter() - began


async def measure(url: str, rounds: int, tokens: int) -> dict[int, Level]:
    results = {n: Level() for n in LEVELS}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        await one_round(http, 1, 8, 0)  # warm-up: the first forward passes are slow
        for r in range(rounds):
            for n in LEVELS:
                streams, wall = await one_round(http, n, tokens, r)
                results[n].streams += streams
                results[n].tokens += sum(s.tokens for s in streams)
                results[n].wall_s += wall
    return results


def start_engine(port: int, max_batch: int, threads: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_ENGINE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "workers.engine", "--backend", "torch", "--port", str(port),
         "--max-batch", str(max_batch), "--threads", str(threads), "--log-level", "warning"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def wait_healthy(proc: subprocess.Popen, url: str, timeout_s: float = 300.0) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise SystemExit(f"engine exited with {proc.returncode}:\n{out}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return time.monotonic() - began
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"engine not healthy after {timeout_s:.0f}s")


def report(results: dict[int, Level], tokens: int) -> None:
    base = results[LEVELS[0]].streams
    base_ttft = statistics.median(s.ttft_s for s in base)
    base_rate = statistics.median(s.decode_tokens_per_s for s in base)
    print(f"{tokens} tokens per stream; p50 over streams; ratio = this level / 1 stream; bar: TTFT p50 < {BAR_TTFT_S:.0f} s, "
          f">= {BAR_TOKENS_PER_S:.0f} tok/s per stream")
    for n in LEVELS:
        streams = results[n].streams
        ttft = statistics.median(s.ttft_s for s in streams)
        rate = statistics.median(s.decode_tokens_per_s for s in streams)
        ttft_ok = "meets" if ttft < BAR_TTFT_S else "MISSES"
        rate_ok = "meets" if rate >= BAR_TOKENS_PER_S else "MISSES"
        print(
            f"{n:2d} stream{'s' if n > 1 else ' '} ({len(streams):2d} runs)  "
            f"TTFT p50 {ttft * 1000:7.0f} ms (x{ttft / base_ttft:5.2f}, bar {ttft_ok})   "
            f"decode p50 {rate:5.1f} tok/s/stream (x{rate / base_rate:4.2f}, bar {rate_ok})   "
            f"aggregate {results[n].tokens / results[n].wall_s:6.1f} tok/s"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 1, 4 and 16 streams, interleaved")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per stream")
    parser.add_argument("--threads", type=int, default=0, help="the engine's torch threads (0: its automatic choice)")
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_engine(port, max(LEVELS), args.threads)
    try:
        ready_s = wait_healthy(proc, url)
        model = httpx.get(url + "/get_model_info").json()["model_path"]
        threads = args.threads or f"auto ({torch_threads(0, usable_cpus())})"
        print(f"engine: {model}, healthy {ready_s:.1f} s after start (a first start also converts it); "
              f"torch threads {threads}; {usable_cpus()} cpus, shared with this client")
        report(asyncio.run(measure(url, args.rounds, args.tokens)), args.tokens)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
