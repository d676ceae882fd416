"""Pipeline overhead: TTFT and inter-token latency through the whole stack vs. the engine alone.

One run starts an isolated stack (tools/isolated.py: prefixed topics, own
keyspace, every service as a process) on the synthetic CPU engine, then
alternates turns: one straight to the engine over SGLang's API (the baseline),
one through gateway → Kafka → context → router → worker → engine → Kafka →
gateway → SSE. Both see the same engine at the same moment, so the difference
is what Parley adds: to the first token, between tokens, and from the last
token to the end of the stream (the close: the reply settled on the log). The synthetic engine decodes at 25 tokens/s, and the
run sets the worker's coalescing window to 30 ms (the default is 80), so every
token is its own SSE delta in both paths and inter-token gaps compare like with like.

``--encryption both`` starts two stacks, one sealing content (DESIGN.md §12) and one not
(``PARLEY_ENCRYPTION=false``), and alternates turns between them too, so the cost of sealing
is a ratio of two figures measured side by side.

Run: `python -m bench.pipeline [--turns N] [--encryption on|off|both]` with Kafka and Cassandra up (`make infra`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from bench.load import pct
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.client import ParleyClient
from workers.engine_api import GenerateRequest

TOKENS = 24
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "100",
    "PARLEY_ENGINE_TOKENS_PER_S": "25",
    "PARLEY_ENGINE_PREFIX_CACHE_TOKENS": "0",
    "PARLEY_CONTEXT_MAX_TOKENS": str(TOKENS),
    # A window below the engine's 40 ms between tokens, so each token is its own delta on both paths
    # (the default 80 ms carries two per chunk: cheaper, and a gap this benchmark would count twice).
    "PARLEY_WORKER_COALESCE_MS": "30",
}


async def _timed(texts: AsyncIterator[str]) -> tuple[float, list[float], float]:
    """(TTFT, gaps between text pieces, last piece → end of the stream) of a stream of text pieces.

    The close is what settling a reply costs: through the stack, the worker's transaction of
    GenerationCompleted + UsageRecorded (workers/transactions.py), then the final chunk.
    """
    began = time.perf_counter()
    first, last, gaps = None, 0.0, []
    async for _ in texts:
        now = time.perf_counter()
        if first is None:
            first = now - began
        else:
            gaps.append(now - last)
        last = now
    assert first is not None, "no text came back"
    return first, gaps, time.perf_counter() - last


async def _stack_texts(client: ParleyClient, cid: str, text: str) -> AsyncIterator[str]:
    async for event in client.stream_message(cid, text):
        if event.event == "delta":
            yield event.data["text"]


async def _engine_texts(engine, text: str) -> AsyncIterator[str]:
    request = GenerateRequest(rid=uuid.uuid4().hex, text=text, max_new_tokens=TOKENS)
    async for delta in engine.generate(request):
        if delta.text:
            yield delta.text


def through_stack(client: ParleyClient, cid: str, text: str):
    return _timed(_stack_texts(client, cid, text))


def direct(engine, text: str):
    return _timed(_engine_texts(engine, text))


class Turns:
    """Alternating turns on one stack: straight to its engine, then through the stack."""

    def __init__(self, stack: isolated.IsolatedStack) -> None:
        self.stack = stack
        self.results: dict[str, tuple[list[float], list[float], list[float]]] = {"engine": ([], [], []), "parley": ([], [], [])}
        self.done = 0

    async def start(self) -> None:
        from workers.sglang import SGLangClient

        _, key = self.stack.create_user("bench", "enterprise")
        self.client = ParleyClient(self.stack.url, key)
        self.engine = SGLangClient(self.stack.engine_url)
        self.cid = await self.client.create_conversation("bench")
        await through_stack(self.client, self.cid, "warm-up")  # first-use costs (connections, JIT of prepared statements)

    async def one(self) -> None:
        text = f"turn {self.done}: explain something briefly"
        for name, run in (("engine", direct(self.engine, text)), ("parley", through_stack(self.client, self.cid, text))):
            ttft, gaps, close = await run
            self.results[name][0].append(ttft)
            self.results[name][1].extend(gaps)
            self.results[name][2].append(close)
        self.done += 1
        if self.done % 10 == 0:
            self.cid = await self.client.create_conversation("bench")  # keep prompts short

    async def close(self) -> None:
        await self.client.close()
        await self.engine.close()


async def measure(stacks: dict[str, isolated.IsolatedStack], turns: int) -> dict[str, dict]:
    """Turns on each stack, one at a time in turn, so every stack sees the machine at the same moments."""
    runs = {name: Turns(stack) for name, stack in stacks.items()}
    try:
        for run in runs.values():
            await run.start()
        for _ in range(turns):
            for run in runs.values():
                await run.one()
    finally:
        for run in runs.values():
            await run.close()
    return {name: run.results for name, run in runs.items()}


def report(results: dict[str, tuple[list[float], list[float], list[float]]]) -> None:
    ms = 1000.0
    (e_ttft, e_itl, e_close), (p_ttft, p_itl, p_close) = results["engine"], results["parley"]
    print(f"turns: {len(p_ttft)}, inter-token gaps: engine {len(e_itl)}, parley {len(p_itl)}")
    for label, e, p in (("TTFT", e_ttft, p_ttft), ("inter-token", e_itl, p_itl), ("close", e_close, p_close)):
        for q in (0.5, 0.99):
            ev, pv = pct(e, q) * ms, pct(p, q) * ms
            print(
                f"{label:12s} p{int(q * 100):<2d}  engine {ev:7.1f} ms   parley {pv:7.1f} ms   "
                f"added {pv - ev:+7.1f} ms   ratio {pv / ev:5.2f}"
            )
    print(f"TTFT mean: engine {statistics.mean(e_ttft) * ms:.1f} ms, parley {statistics.mean(p_ttft) * ms:.1f} ms")


def report_encryption(results: dict[str, dict]) -> None:
    ms = 1000.0
    for name, r in results.items():
        print(f"--- encryption {name}")
        report(r)
    on, off = results["on"]["parley"][0], results["off"]["parley"][0]
    for q in (0.5, 0.99):
        print(f"TTFT p{int(q * 100):<2d} sealed {pct(on, q) * ms:7.1f} ms   plain {pct(off, q) * ms:7.1f} ms   ratio {pct(on, q) / pct(off, q):5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--encryption", choices=("on", "off", "both"), default="on")
    args = parser.parse_args()
    modes = ("on", "off") if args.encryption == "both" else (args.encryption,)
    stacks: dict[str, isolated.IsolatedStack] = {}
    with tempfile.TemporaryDirectory() as logs:
        try:
            for mode in modes:
                kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), f"bench{mode}")
                env = {**ENV, "PARLEY_ENCRYPTION": "true" if mode == "on" else "false"}
                stacks[mode] = isolated.start(kafka, cassandra, Path(logs) / mode, env)
            results = asyncio.run(measure(stacks, args.turns))
            if len(results) == 1:
                report(next(iter(results.values())))
            else:
                report_encryption(results)
        finally:
            for stack in stacks.values():
                stack.stop()
                isolated.drop(stack.kafka, stack.cassandra)


if __name__ == "__main__":
    main()
