"""The CPU engine as a real process, driven over HTTP by the worker's SGLangClient.

Each backend runs as ``python -m workers.engine`` on a free port, exactly as an
operator starts it. No assertion here depends on timing: batching and the
synthetic concurrency limit are read from the engine's own counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from workers.engine.tokenizer import WordTokenizer
from workers.engine_api import EngineDelta, EngineRejected, EngineUnavailable, GenerateRequest
from workers.sglang import SGLangClient
from tools.supervisor import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90



def start_engine(*flags: str) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_ENGINE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.engine", "--port", str(port), "--log-level", "warning", *flags],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"engine exited with {proc.returncode} before serving:\n{out}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"engine {flags} not healthy after {START_TIMEOUT_S}s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def torch_engine() -> Iterator[str]:
    yield from start_engine("--backend", "random", "--max-batch", "8", "--context-length", "256", "--max-total-tokens", "4096")


@pytest.fixture(scope="module")
def cumulative_engine() -> Iterator[str]:
    """The torch_engine's model and seed, streaming as SGLang does by default."""
    yield from start_engine(
        "--backend", "random", "--max-batch", "8", "--context-length", "256", "--max-total-tokens", "4096",
        "--no-incremental-streaming-output",
    )


@pytest.fixture(scope="module")
def synthetic_engine() -> Iterator[str]:
    yield from start_engine(
        "--backend", "synthetic", "--max-batch", "4", "--synthetic-ttft-ms", "50", "--synthetic-tokens-per-s", "200"
    )


async def generate(url: str, req: GenerateRequest) -> list[EngineDelta]:
    client = SGLangClient(url)
    try:
        return [d async for d in client.generate(req)]
    finally:
        await client.close()


def server_info(url: str) -> dict:
    return httpx.get(url + "/get_server_info").json()["internal_states"][0]


# ------------------------------------------------------------ torch backend


async def test_torch_stream_deltas_concatenate_to_the_full_reply(torch_engine: str) -> None:
    prompt = "The capital of France is"
    deltas = await generate(torch_engine, GenerateRequest(rid="t-stream", text=prompt, max_new_tokens=24, temperature=0.0))
    whole = httpx.post(
        torch_engine + "/generate",
        json={"text": prompt, "sampling_params": {"max_new_tokens": 24, "temperature": 0.0}},
    ).json()
    assert "".join(d.text for d in deltas) == whole["text"]
    last = deltas[-1]
    assert last.finish_reason in ("length", "stop")
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert last.prompt_tokens == len(prompt.encode()) + 1  # bytes + BOS
    assert last.completion_tokens == whole["meta_info"]["completion_tokens"] == len(whole["output_ids"])
    assert last.completion_tokens == 24 or last.finish_reason == "stop"
    assert last.cached_tokens == 0  # the torch backend reuses no KV across requests


def raw_events(url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + "/generate", json={**body, "stream": True}, timeout=60) as resp:
        return [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]


async def test_both_stream_forms_carry_the_same_reply_and_the_client_reads_each(
    torch_engine: str, cumulative_engine: str
) -> None:
    """SGLang's two /generate stream forms, each announced by /get_server_info: incremental (Parley's
    default) sends each event's own text and ids, cumulative (SGLang's default) the reply so far."""
    assert httpx.get(torch_engine + "/get_server_info").json()["incremental_streaming_output"] is True
    assert httpx.get(cumulative_engine + "/get_server_info").json()["incremental_streaming_output"] is False
    body = {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}}
    incremental, cumulative = raw_events(torch_engine, body), raw_events(cumulative_engine, body)
    reply = cumulative[-1]["text"]
    assert "".join(e["text"] for e in incremental) == reply
    assert [i for e in incremental for i in e["output_ids"]] == cumulative[-1]["output_ids"]
    assert all(b["text"].startswith(a["text"]) for a, b in zip(cumulative, cumulative[1:]))
    assert incremental[-1]["meta_info"]["completion_tokens"] == cumulative[-1]["meta_info"]["completion_tokens"] == 32
    req = GenerateRequest(rid="forms", text="Once upon a time", max_new_tokens=32, temperature=0.0)
    for url in (torch_engine, cumulative_engine):
        assert "".join(d.text for d in await generate(url, req)) == reply


async def test_torch_abort_mid_stream_ends_cancelled(torch_engine: str) -> None:
    client = SGLangClient(torch_engine)
    req = GenerateRequest(rid="t-abort", text="Count slowly:", max_new_tokens=200, temperature=0.0)
    deltas: list[EngineDelta] = []
    try:
        async for d in client.generate(req):
            deltas.append(d)
            if len(deltas) == 1:
                await client.abort("t-abort")
    finally:
        await client.close()
    assert deltas[-1].finish_reason == "cancelled"
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert deltas[-1].completion_tokens < 200
    loads = httpx.get(torch_engine + "/v1/loads").json()["loads"][0]
    assert loads["num_running_reqs"] == 0 and loads["num_waiting_reqs"] == 0


async def test_torch_over_long_prompt_is_refused_like_sglang(torch_engine: str) -> None:
    long_prompt = "z" * 400
    resp = httpx.post(torch_engine + "/generate", json={"text": long_prompt, "sampling_params": {"max_new_tokens": 4}})
    assert resp.status_code == 400
    assert resp.json() == {
        "error": {"message": "The input (401 tokens) is longer than the model's context length (256 tokens)."}
    }
    with pytest.raises(EngineRejected, match="longer than the model's context length"):
        await generate(torch_engine, GenerateRequest(rid="t-long", text=long_prompt, max_new_tokens=4))


async def test_torch_concurrent_requests_share_decode_steps(torch_engine: str) -> None:
    before = server_info(torch_engine)
    reqs = [GenerateRequest(rid=f"t-batch-{i}", text=f"prompt number {i}", max_new_tokens=40 + i, temperature=0.0) for i in range(6)]
    results = await asyncio.gather(*(generate(torch_engine, r) for r in reqs))
    assert all(r[-1].finish_reason in ("length", "stop") for r in results)
    after = server_info(torch_engine)
    steps = after["decode_steps"] - before["decode_steps"]
    tokens = after["decode_tokens"] - before["decode_tokens"]
    assert after["max_decode_batch_size"] >= 2
    assert tokens > steps  # more tokens decoded than forward passes run: requests were batched


async def test_torch_model_info_load_and_health(torch_engine: str) -> None:
    client = SGLangClient(torch_engine)
    try:
        info = await client.model_info()
        assert info.untrained is True and "untrained" in info.model and info.context_length == 256
        load = await client.load()
        assert (load.running, load.queued, load.max_running) == (0, 0, 8)
        assert 0.0 <= load.kv_usage <= 1.0
        assert await client.health() is True
    finally:
        await client.close()
    assert httpx.get(torch_engine + "/health_generate", timeout=30).status_code == 200
    raw = httpx.get(torch_engine + "/get_model_info").json()
    assert raw["is_generation"] is True and raw["untrained"] is True


# ------------------------------------------------------------ synthetic backend


async def test_synthetic_counts_and_prefix_cache(synthetic_engine: str) -> None:
    system = "You are a helpful assistant. Answer briefly."
    first = await generate(synthetic_engine, GenerateRequest(rid="s-1", text=system + " What is rain?", max_new_tokens=10))
    second = await generate(synthetic_engine, GenerateRequest(rid="s-2", text=system + " What is snow?", max_new_tokens=10))
    pieces = WordTokenizer().pieces
    assert first[-1].prompt_tokens == len(pieces(system + " What is rain?"))
    assert (first[-1].finish_reason, first[-1].completion_tokens) == ("length", 10)
    assert len(first) == 10  # one delta per token
    assert first[-1].cached_tokens == 0
    assert second[-1].cached_tokens == len(pieces(system + " What is"))
    load = httpx.get(synthetic_engine + "/v1/loads").json()["loads"][0]
    assert load["cache_hit_rate"] > 0 and load["max_running_requests"] == 4


async def test_synthetic_respects_max_batch_and_aborts(synthetic_engine: str) -> None:
    reqs = [GenerateRequest(rid=f"s-many-{i}", text=f"question {i}", max_new_tokens=5) for i in range(10)]
    results = await asyncio.gather(*(generate(synthetic_engine, r) for r in reqs))
    assert all(r[-1].completion_tokens == 5 for r in results)
    assert server_info(synthetic_engine)["max_running_seen"] == 4

    client = SGLangClient(synthetic_engine)
    deltas: list[EngineDelta] = []
    try:
        async for d in client.generate(GenerateRequest(rid="s-abort", text="go on", max_new_tokens=5000)):
            deltas.append(d)
            if len(deltas) == 2:
                await client.abort("s-abort")
    finally:
        await client.close()
    assert deltas[-1].finish_reason == "cancelled" and deltas[-1].completion_tokens < 5000


async def test_client_disconnect_frees_the_slot(synthetic_engine: str) -> None:
    body = {"text": "leave early", "sampling_params": {"max_new_tokens": 5000}, "stream": True, "rid": "s-gone"}
    async with httpx.AsyncClient(base_url=synthetic_engine) as http:
        async with http.stream("POST", "/generate", json=body) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    break  # hang up after the first token
        deadline = time.monotonic() + 10
        while (await http.get("/v1/loads")).json()["loads"][0]["num_running_reqs"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert (await http.get("/v1/loads")).json()["loads"][0]["num_running_reqs"] == 0


async def test_probes_cancelled_by_a_timeout_give_their_connections_back(synthetic_engine: str) -> None:
    """httpcore keeps a connection ACTIVE when a request is cancelled mid-send; the client must not leak them."""
    client = SGLangClient(synthetic_engine)
    try:
        for i in range(120):  # more than the pool's 100 connections
            with contextlib.suppress(TimeoutError, EngineUnavailable):
                await asyncio.wait_for(client.load(), timeout=0.0005 * (i % 5))
        assert await asyncio.wait_for(client.health(), timeout=10), "the pool is exhausted"
        await asyncio.sleep(0.5)  # the shielded probes finish
        states = [repr(c) for c in client._http._transport._pool.connections]  # type: ignore[attr-defined]
        assert not [s for s in states if "ACTIVE" in s], states
    finally:
        await client.close()
