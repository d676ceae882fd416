"""The CPU engine's ``/generate`` stream in SGLang's two forms, read back by the worker's client.

Cumulative (SGLang's default): every event carries the whole reply so far. Incremental
(``--incremental-streaming-output``): every event carries only its own text and token ids, while
``meta_info``'s counts stay totals. ``/get_server_info`` says which, under SGLang's key.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from starlette.testclient import TestClient

from parley.settings import from_env
from workers.engine.app import create_app
from workers.engine.settings import EngineSettings
from workers.engine.synthetic import SyntheticBackend, synthetic_pieces
from workers.sglang import decode_stream

PROMPT = "Tell me about the sea."
N = 40


def engine(incremental: bool) -> TestClient:
    settings = replace(
        from_env(EngineSettings, {}), backend="synthetic", synthetic_ttft_ms=0.0, synthetic_tokens_per_s=10_000.0
    )
    return TestClient(create_app(SyntheticBackend(settings), incremental_streaming_output=incremental))


def stream(http: TestClient, **sampling: object) -> list[str]:
    body = {"text": PROMPT, "stream": True, "sampling_params": {"max_new_tokens": N, **sampling}}
    return http.post("/generate", json=body).text.splitlines()


def events(lines: list[str]) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


@pytest.mark.parametrize("incremental", [False, True])
def test_server_info_says_which_form_the_stream_takes(incremental: bool) -> None:
    with engine(incremental) as http:
        assert http.get("/get_server_info").json()["incremental_streaming_output"] is incremental


def test_incremental_events_carry_only_what_they_add() -> None:
    with engine(True) as http:
        got = events(stream(http))
    reply = "".join(synthetic_pieces(PROMPT, N))
    # Joined, the events are the reply exactly: nothing repeated (a slow reader gets steps merged).
    assert "".join(e["text"] for e in got) == reply
    assert sum(len(e["output_ids"]) for e in got) == N
    counts = [e["meta_info"]["completion_tokens"] for e in got]
    assert counts == sorted(counts) and counts[-1] == N  # totals, as SGLang keeps them
    assert got[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": N}


def test_cumulative_events_carry_the_whole_reply_so_far() -> None:
    with engine(False) as http:
        got = events(stream(http))
    texts = [e["text"] for e in got]
    assert texts[-1] == "".join(synthetic_pieces(PROMPT, N))
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:]))
    assert [len(e["output_ids"]) for e in got] == [e["meta_info"]["completion_tokens"] for e in got]


@pytest.mark.parametrize("incremental", [False, True])
def test_the_worker_client_reads_either_form_to_the_same_deltas(incremental: bool) -> None:
    stop = synthetic_pieces(PROMPT, N)[7].strip()
    with engine(incremental) as http:
        lines = stream(http, stop=[stop])
    deltas = decode_stream(lines, incremental=incremental)
    text = "".join(d.text for d in deltas)
    reply = "".join(synthetic_pieces(PROMPT, N))
    assert text == reply[: reply.find(stop)] and deltas[-1].finish_reason == "stop"


def test_a_non_streamed_reply_is_whole_in_either_form() -> None:
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": N}}
    with engine(True) as http:
        whole = http.post("/generate", json=body).json()
    assert whole["text"] == "".join(synthetic_pieces(PROMPT, N)) and len(whole["output_ids"]) == N
