"""The engine API's per-token cost, by reply length: SGLang's cumulative stream against its incremental one.

Two figures, each for both forms in the same run:

* the token path alone, in process: per token, what the engine does to report
  it (detokenize, stop strings, build and serialise the event) and what the
  worker's ``StreamDecoder`` does to read it, one event per token. Cumulative
  events carry the whole reply so far, so their cost grows with the length
  (O(n²) per reply); incremental ones do not;
* end to end: the CPU engine (synthetic backend: no model) started once per
  form, one reply of each length streamed through the worker's own client
  (``workers.sglang.SGLangClient``), paced (``--rate``) as a real engine paces
  tokens; CPU per token of the engine process (``/proc/<pid>/stat``) and of
  the client (``time.process_time``), with the events counted (a reader that
  falls behind gets steps merged, as in SGLang, so fewer, larger events).

``--old-engine PATH`` adds a column for an engine run from another checkout
(say a worktree of the commit before the token path went O(n)), streaming the
cumulative form it spoke, read by this client as cumulative.

Run: `python -m bench.token_path [--lengths 256,2048,8192] [--rate 500] [--old-engine PATH]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tools.supervisor import free_port
from workers.engine import protocol
from workers.engine.detokenize import IncrementalText
from workers.engine.protocol import Progress
from workers.engine.synthetic import synthetic_pieces
from workers.engine.tokenizer import WordTokenizer
from workers.engine_api import GenerateRequest
from workers.sglang import StreamDecoder, SGLangClient

REPO = Path(__file__).resolve().parents[1]
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Cost:
    tokens: int
    events: int
    engine_us: float  # engine CPU per token
    client_us: float  # client CPU per token


def token_path(tokens: int, incremental: bool) -> tuple[float, float]:
    """(engine µs, client µs) per token of one reply, one event per token, in this process."""
    pieces = synthetic_pieces("Tell me a long story.", tokens)
    ids = [WordTokenizer.piece_id(p) for p in pieces]
    by_id = dict(zip(ids, pieces))
    text = IncrementalText(lambda xs: "".join(by_id[i] for i in xs), stop=("<|im_end|>",))  # the worker sends its template's
    decoder = StreamDecoder("bench", incremental)
    shown: list[int] = []
    whole, engine_s, client_s = "", 0.0, 0.0
    for n, token in enumerate(ids, 1):
        began = time.perf_counter()
        shown.append(token)
        added = text.update(shown, final=n == tokens)
        p = Progress(added, (token,), n, 16, 0, protocol.finish_length(n) if n == tokens else None)
        if incremental:
            event = protocol.output("bench", added, p.output_ids, p)
        else:
            whole += added
            event = protocol.output("bench", whole, shown, p)
        line = b"data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()  # as workers/engine/app.py
        sent = time.perf_counter()
        delta = decoder.feed(line)
        client_s += time.perf_counter() - sent
        engine_s += sent - began
        assert delta is not None and delta.completion_tokens == n
    return engine_s / tokens * 1e6, client_s / tokens * 1e6


def engine_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime


def start(cwd: Path, rate: float, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_ENGINE_")} | {"PYTHONPATH": str(cwd)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.engine", "--backend", "synthetic", "--port", str(port), "--log-level", "warning",
         "--synthetic-ttft-ms", "0", "--synthetic-tokens-per-s", str(rate), "--context-length", "16384",
         "--max-total-tokens", "16384", *flags],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"engine in {cwd} not healthy after 60 s")


async def one_reply(client: SGLangClient, pid: int, tokens: int) -> Cost:
    request = GenerateRequest(rid=f"bench-{tokens}-{time.monotonic_ns()}", text="Tell me a long story.", max_new_tokens=tokens)
    engine_before, client_before = engine_cpu_s(pid), time.process_time()
    events = 0
    last = None
    async for last in client.generate(request):
        events += 1
    assert last is not None and last.finish_reason == "length" and last.completion_tokens == tokens, last
    engine_s, client_s = engine_cpu_s(pid) - engine_before, time.process_time() - client_before
    return Cost(tokens, events, engine_s / tokens * 1e6, client_s / tokens * 1e6)


async def measure(url: str, pid: int, lengths: list[int]) -> list[Cost]:
    client = SGLangClient(url, timeout_s=300)
    try:
        await one_reply(client, pid, 16)  # warm-up: connections, imports
        return [await one_reply(client, pid, n) for n in lengths]
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="256,2048,8192", help="reply lengths in tokens, comma-separated")
    parser.add_argument("--rate", type=float, default=500.0, help="tokens per second the engine paces each reply at")
    parser.add_argument("--old-engine", type=Path, help="another checkout whose engine to measure too (cumulative)")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    columns: list[tuple[str, Path, tuple[str, ...]]] = []
    if args.old_engine:
        columns.append((f"old engine ({args.old_engine.name}), cumulative", args.old_engine.resolve(), ()))
    columns += [
        ("cumulative (SGLang's default)", REPO, ("--no-incremental-streaming-output",)),
        ("incremental (--incremental-streaming-output)", REPO, ("--incremental-streaming-output",)),
    ]
    print("token path alone, in process, one event per token: µs per token")
    token_path(256, incremental=False), token_path(256, incremental=True)  # warm-up
    for n in lengths:
        (ce, cc), (ie, ic) = token_path(n, incremental=False), token_path(n, incremental=True)
        print(f"  {n:5d} tokens: cumulative engine {ce:7.1f}  client {cc:7.1f}   |   incremental engine {ie:5.1f}  client {ic:5.1f}")
    print(f"end to end, CPU per token of the engine process and the worker client; synthetic backend at {args.rate:.0f} tokens/s")
    for name, cwd, flags in columns:
        proc, url = start(cwd, args.rate, *flags)
        try:
            costs = asyncio.run(measure(url, proc.pid, lengths))
        finally:
            proc.terminate()
            proc.wait(15)
        print(f"  {name}")
        for c in costs:
            print(f"    {c.tokens:5d} tokens ({c.events:5d} events): engine {c.engine_us:7.1f} µs/token, "
                  f"client {c.client_us:7.1f} µs/token")


if __name__ == "__main__":
    main()
