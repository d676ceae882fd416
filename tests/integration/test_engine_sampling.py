"""SGLang's per-request sampling params on the CPU engine's default model (SmolLM2-135M-Instruct), as a real
process over HTTP: sampling_seed reproduces a sampled reply alone or batched, penalties change what is
generated, a json_schema constrains the reply, and what the engine does not implement is refused by name.

Batching is proven from the engine's own counters, never from timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.test_engine import server_info, start_engine
from tests.integration.test_engine_packaged_model import chat
from workers.engine_api import EngineRejected, GenerateRequest
from workers.sglang import SGLangClient

TOKENS = 24
#: Open-ended: a sampled reply branches within a few tokens.
STORY = chat("Invent a name for a new colour and describe it in one sentence.")


@pytest.fixture(scope="module")
def smol_engine() -> Iterator[str]:
    yield from start_engine("--backend", "torch", "--max-batch", "4", "--context-length", "1024")


async def generate(http: httpx.AsyncClient, text: str, **params: object) -> dict:
    resp = await http.post("/generate", json={"text": text, "sampling_params": {"max_new_tokens": TOKENS, **params}})
    assert resp.status_code == 200, resp.text
    return resp.json()


async def alone_then_batched(url: str, **params: object) -> tuple[dict, dict]:
    """The same request twice: alone, then while another request decodes beside it the whole time."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        alone = await generate(http, STORY, **params)
        before = server_info(url)
        neighbour = generate(http, chat("Count from one to fifty."), max_new_tokens=TOKENS + 16, temperature=1.0, ignore_eos=True)
        _, batched = await asyncio.gather(neighbour, generate(http, STORY, **params))
        after = server_info(url)
    # More tokens decoded than forward passes run while the two were in flight: they shared decode steps.
    assert after["decode_tokens"] - before["decode_tokens"] > after["decode_steps"] - before["decode_steps"]
    return alone, batched


async def test_same_seed_same_sampled_reply_alone_or_batched(smol_engine: str) -> None:
    alone, batched = await alone_then_batched(smol_engine, temperature=1.0, sampling_seed=1234)
    assert batched["text"] == alone["text"] and batched["output_ids"] == alone["output_ids"]
    assert len(alone["output_ids"]) >= 8, alone


async def test_different_seeds_give_different_replies(smol_engine: str) -> None:
    async with httpx.AsyncClient(base_url=smol_engine, timeout=120) as http:
        replies = [(await generate(http, STORY, temperature=1.0, sampling_seed=seed))["text"] for seed in (1, 2, 3, 4)]
    assert len(set(replies)) >= 2, replies


async def test_greedy_reply_is_the_same_alone_or_batched(smol_engine: str) -> None:
    alone, batched = await alone_then_batched(smol_engine, temperature=0.0)
    assert batched["output_ids"] == alone["output_ids"]


async def test_frequency_and_presence_penalties_change_a_repetitive_reply(smol_engine: str) -> None:
    # A raw (not chat) prompt that invites repeating it; penalties count the generated tokens only.
    prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
    async with httpx.AsyncClient(base_url=smol_engine, timeout=120) as http:
        plain, discouraged, encouraged, present = [
            (await generate(http, prompt, temperature=0.0, ignore_eos=True, **penalty))["output_ids"]
            for penalty in ({}, {"frequency_penalty": 1.5}, {"frequency_penalty": -1.0}, {"presence_penalty": 1.5})
        ]
    assert len(plain) == len(discouraged) == len(encouraged) == len(present) == TOKENS
    assert discouraged != plain and present != plain
    # A negative penalty makes it repeat itself (SmolLM2 greedy: 7 distinct tokens against 19), a positive one less.
    assert len(set(encouraged)) < len(set(plain)) <= len(set(discouraged))


async def test_unimplemented_params_are_refused_by_name(smol_engine: str) -> None:
    message = (
        "sampling param 'stop_regex' is not supported by Parley's CPU engine "
        "(stop strings are supported, stop regexes are not)"
    )
    body = {"text": STORY, "sampling_params": {"max_new_tokens": 4, "stop_regex": [r"\d+"]}}
    resp = httpx.post(smol_engine + "/generate", json=body)
    assert (resp.status_code, resp.json()) == (400, {"error": {"message": message}})
    n = httpx.post(smol_engine + "/generate", json={"text": STORY, "sampling_params": {"n": 2}})
    assert n.status_code == 400 and "sampling param 'n'" in n.json()["error"]["message"]
    # Defaults a client sends are served.
    neutral = {"max_new_tokens": 2, "n": 1, "json_schema": None, "frequency_penalty": 0, "logit_bias": None}
    assert httpx.post(smol_engine + "/generate", json={"text": STORY, "sampling_params": neutral}, timeout=60).status_code == 200
    info = httpx.get(smol_engine + "/get_server_info").json()["parley_sampling_params"]
    assert "sampling_seed" in info["applied"] and info["accepted_without_effect"] == []
    assert "stop_regex" in info["refused_unless_neutral"] and "structural_tag" in info["applied"]


async def test_a_streamed_refusal_reaches_the_worker_client_as_rejected(smol_engine: str) -> None:
    # A range error streams back to the worker's client as a refusal.
    client = SGLangClient(smol_engine)
    try:
        with pytest.raises(EngineRejected, match="top_p must be in"):
            async for _ in client.generate(GenerateRequest(rid="smol-bad-top-p", text=STORY, max_new_tokens=4, top_p=0.0)):
                pass
    finally:
        await client.close()


async def test_the_workers_json_schema_streams_back_valid_json_and_a_bad_one_is_refused(smol_engine: str) -> None:
    """Over HTTP, as the worker sends it: the streamed reply is JSON valid against the schema, ended by the grammar."""
    import json

    import jsonschema

    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 30}, "warm": {"type": "boolean"}},
              "required": ["colour", "warm"], "additionalProperties": False}  # fmt: skip
    client = SGLangClient(smol_engine)
    try:
        request = GenerateRequest(rid="smol-json", text=STORY, max_new_tokens=80, temperature=0.0, json_schema=json.dumps(schema))
        deltas = [d async for d in client.generate(request)]
        jsonschema.validate(json.loads("".join(d.text for d in deltas)), schema)
        assert deltas[-1].finish_reason == "stop" and deltas[-1].completion_tokens < 80
        with pytest.raises(EngineRejected, match="Invalid grammar request: json_schema"):
            async for _ in client.generate(GenerateRequest(rid="smol-bad-json", text=STORY, max_new_tokens=4, json_schema="{nope")):
                pass
    finally:
        await client.close()
