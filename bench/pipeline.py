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

Run: `python -m bench.pipeline [--turns N]` with Kafka and Cassandra up (`make infra`).
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


async def measure(stack: isolated.IsolatedStack, turns: int) -> dict[str, tuple[list[float], list[float]]]:
    from workers.sglang import SGLangClient

    _, key = stack.create_user("bench", "enterprise")
    client = ParleyClient(stack.url, key)
    engine = SGLangClient(stack.engine_url)
    results: dict[str, tuple[list[float], list[float], list[float]]] = {"engine": ([], [], []), "parley": ([], [], [])}
    try:
        cid = await client.create_conversation("bench")
        await through_stack(client, cid, "warm-up")  # first-use costs (connections, JIT of prepared statements)
        for i in range(turns):
            text = f"turn {i}: explain something briefly"
            for name, run in (("engine", direct(engine, text)), ("parley", through_stack(client, cid, text))):
                ttft, gaps, close = await run
                results[name][0].append(ttft)
                results[name][1].extend(gaps)
                results[name][2].append(close)
            if i % 10 == 9:
                cid = await client.create_conversation("bench")  # keep prompts short
    finally:
        await client.close()
        await engine.close()
    return results


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "bench")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), ENV)
        try:
            report(asyncio.run(measure(stack, args.turns)))
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
