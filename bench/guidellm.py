"""GuideLLM, the vLLM project's serving benchmark, unmodified, against Parley's `/v1/chat/completions`.

One run starts an isolated stack (tools/isolated.py) with every service of
`make run` (moderation, titles, documents, encryption) on the synthetic engine
at a chat model's pace (100 ms to the first token, 30 tokens/s per stream), and
GuideLLM's own mock OpenAI server at the same pace (`guidellm mock-server`,
an ideal server: what the engine alone would give GuideLLM's client). At each
concurrency GuideLLM runs its `concurrent` profile for a fixed time against
both, with synthetic prompts of 256 tokens (counted by the packaged SmolLM2's
tokenizer) and 128 output tokens (GuideLLM sends `max_tokens` and
`ignore_eos`, as it does to vLLM and SGLang). Printed per step: TTFT p50/p95,
inter-token latency p50/p95, requests/s and output tokens/s, Parley's beside
the baseline's, and each of the stack's processes' CPU seconds per 1,000
output tokens (Kafka, Cassandra and the load generators counted apart).

GuideLLM lives in its own environment (`.venv-bench`, `make bench-tools`,
pinned in bench/guidellm.txt): it needs click ≥ 8.4, which faust's command
line (Parley's processors) refuses, so it cannot share `.venv`.

Run: `python -m bench.guidellm [--streams 1,10,25,50] [--seconds 30]` with Kafka and Cassandra up (`make setup`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.load import cpu_now, processes
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.supervisor import free_port
from workers.engine import packaged_model

ROOT = Path(__file__).resolve().parent.parent
GUIDELLM = ROOT / ".venv-bench" / "bin" / "guidellm"
TTFT_MS, TOKENS_PER_S = 100, 30
PROMPT_TOKENS, OUTPUT_TOKENS = 256, 128


def env() -> dict[str, str]:
    """The stack: `make run`'s services, on the synthetic engine at a chat model's pace, with room for 50 streams."""
    return {
        "PARLEY_ENGINE_BACKEND": "synthetic",
        "PARLEY_ENGINE_TTFT_MS": str(TTFT_MS),
        "PARLEY_ENGINE_TOKENS_PER_S": str(TOKENS_PER_S),
        "PARLEY_ENGINE_MAX_BATCH": "512",
        "PARLEY_ENGINE_MAX_TOTAL_TOKENS": "1000000",
        "PARLEY_WORKER_MAX_CONCURRENCY": "256",
        "PARLEY_WORKER_MAX_QUEUED": "64",
        "PARLEY_CONTEXT_TOKENIZER": "words",  # the synthetic engine's
    }


def guidellm(target: str, streams: int, seconds: float, tokenizer: Path, out: Path, api_key: str = "") -> dict[str, Any]:
    """One GuideLLM run at ``streams`` concurrent requests for ``seconds``; its benchmark's metrics."""
    backend = f"kind=openai_http,target={target}" + (f",api_key={api_key}" if api_key else "")
    command = [
        str(GUIDELLM), "run",
        "--backend", backend,
        "--profile", f"kind=concurrent,streams={streams}",
        "--constraint", f"kind=max_duration,seconds={seconds:g}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={out}",
        "--disable-console",
    ]
    done = subprocess.run(command, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=seconds * 4 + 180)
    if done.returncode != 0 or not out.is_file():
        raise SystemExit(f"guidellm failed ({done.returncode}) against {target}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (benchmark,) = json.loads(out.read_text())["benchmarks"]
    return benchmark["metrics"]


def figures(metrics: dict[str, Any]) -> dict[str, float]:
    def pick(name: str, q: str) -> float:
        return float(metrics[name]["successful"]["percentiles"][q])

    totals = metrics["request_totals"]
    return {
        "ttft_p50": pick("time_to_first_token_ms", "p50"),
        "ttft_p95": pick("time_to_first_token_ms", "p95"),
        "itl_p50": pick("inter_token_latency_ms", "p50"),
        "itl_p95": pick("inter_token_latency_ms", "p95"),
        "rps": float(metrics["requests_per_second"]["successful"]["mean"]),
        "out_tps": float(metrics["output_tokens_per_second"]["successful"]["mean"]),
        "output_tokens": float(metrics["output_token_count"]["successful"]["total_sum"]),
        "completed": float(totals.get("successful", 0)),
        "errored": float(totals.get("errored", 0)),
    }


def mock_server(port: int, log: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [str(GUIDELLM), "mock-server", "--host", "127.0.0.1", "--port", str(port), "--model", "baseline",
         "--ttft-ms", str(TTFT_MS), "--itl-ms", f"{1000 / TOKENS_PER_S:.1f}", "--output-tokens", str(OUTPUT_TOKENS)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    server.kill()
    raise SystemExit(f"guidellm's mock server did not answer /health in 60 s (its log: {log})")


def report(streams: int, parley: dict[str, float], base: dict[str, float], cpu: dict[str, float]) -> None:
    print(f"\n{streams} concurrent streams ({PROMPT_TOKENS} prompt tokens, {OUTPUT_TOKENS} output tokens):")
    print(f"  {'':30} {'Parley':>10} {'baseline':>10}")
    for name, label, unit in (
        ("ttft_p50", "TTFT p50", "ms"), ("ttft_p95", "TTFT p95", "ms"), ("itl_p50", "inter-token p50", "ms"),
        ("itl_p95", "inter-token p95", "ms"), ("rps", "requests/s", ""), ("out_tps", "output tokens/s", ""),
        ("completed", "requests completed", ""), ("errored", "requests errored", ""),
    ):
        print(f"  {label + (f' ({unit})' if unit else ''):30} {parley[name]:>10.1f} {base[name]:>10.1f}")
    print(f"  added TTFT p50 over the baseline: {parley['ttft_p50'] - base['ttft_p50']:+.1f} ms")
    thousands = parley["output_tokens"] / 1000 or 1.0
    print("  CPU seconds per 1,000 output tokens, by process:")
    for name, seconds in sorted(cpu.items(), key=lambda item: -item[1]):
        print(f"    {name:34} {seconds / thousands:7.3f}")
    ours = sum(s for n, s in cpu.items() if "(shared)" not in n and "GuideLLM" not in n)
    print(f"    {'Parley (its processes, engine included)':34} {ours / thousands:7.3f}")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # of the GuideLLM runs waited for so far
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", default="1,10,25,50", help="concurrent requests per step, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per step and target")
    args = parser.parse_args()
    if not GUIDELLM.is_file():
        raise SystemExit(f"{GUIDELLM} is missing: `make bench-tools` installs GuideLLM into .venv-bench")
    tokenizer = packaged_model.model_dir(Path(os.environ.get("PARLEY_CACHE_DIR", Path.home() / ".cache" / "parley")))
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "guidellm")
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(scratch)
        mock = mock_server(free_port(), logs / "mock-server.log")
        baseline_url = mock.args[mock.args.index("--port") + 1]
        stack = isolated.start(kafka, cassandra, logs, env())
        try:
            _, key = stack.create_user("guidellm", "enterprise")  # no quota, never shed
            pids = processes(stack)
            del pids["load generator (this process)"]  # GuideLLM is the load generator: counted as a child below
            print(f"synthetic engine and baseline at {TTFT_MS} ms to the first token, {TOKENS_PER_S} tokens/s; "
                  f"{args.seconds:g} s per step")
            guidellm(stack.url, 1, 5, tokenizer, logs / "warm.json", key)  # connections, prepared statements
            for streams in (int(s) for s in args.streams.split(",")):
                base = figures(guidellm(f"http://127.0.0.1:{baseline_url}", streams, args.seconds, tokenizer, logs / f"b{streams}.json"))
                before, children = cpu_now(pids), _children_cpu()
                parley = figures(guidellm(stack.url, streams, args.seconds, tokenizer, logs / f"p{streams}.json", key))
                after = cpu_now(pids)
                cpu = {n: after[n] - before[n] for n in pids} | {"GuideLLM (load generator)": _children_cpu() - children}
                report(streams, parley, base, cpu)
        finally:
            stack.stop()
            mock.kill()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
