"""Constrained decoding (json_schema, regex, ebnf) in both backends: the torch backend masks the logits each
step with the grammar's allowed tokens and ends when the grammar does; the synthetic backend's reply is a
sentence of the grammar. The packaged SmolLM2 must write JSON valid against each schema, greedy or sampled."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import replace

import jsonschema
import pytest
import torch

from parley.settings import from_env
from schemas.events import ToolFunction, Tools
from workers.engine import grammar, protocol
from workers.engine.batcher import TorchBackend
from workers.engine.protocol import Grammar, InvalidRequest, Progress, Sampling
from workers.engine.settings import EngineSettings
from workers.engine.synthetic import SyntheticBackend
from workers.engine.torch_model import adjust_logits
from workers.tool_calls import HERMES, JSON_CALLS, forced_schema, structural_tag

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 7}, "minItems": 1, "maxItems": 3},
    },
    "required": ["city", "unit", "days"],
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "zip"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["friend", "family", "work"]}, "maxItems": 3},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "address", "tags", "active"],
    "additionalProperties": False,
}
#: What a forced tool choice (the function named) sends the engine: an array of calls (workers/tool_calls.py).
FORCED = Tools(functions=[ToolFunction(name="get_weather", parameters=json.dumps(WEATHER))], choice="function", function="get_weather", parallel=False)
CALLS = json.loads(forced_schema(FORCED) or "")


def engine_settings(backend: str, **kw: object) -> EngineSettings:
    base = replace(from_env(EngineSettings, {}), backend=backend, context_length=1024, max_total_tokens=8192)
    return replace(base, **kw)


async def run(backend: TorchBackend | SyntheticBackend, rid: str, text: str, **params: object) -> Progress:
    gen = protocol.parse_generate({"text": text, "rid": rid, "sampling_params": params})
    return protocol.joined([p async for p in backend.submit(gen).progress()])


# ------------------------------------------------------------ the mask in the sampler


def test_the_grammar_mask_comes_last_and_wins_over_min_new_tokens() -> None:
    row = torch.tensor([5.0, 1.0, 0.0, -1.0])
    allowed = torch.tensor([False, True, True, False])
    masked = adjust_logits(row, Sampling(logit_bias=((2, 3.0),)), [], frozenset(), allowed)
    assert masked.tolist() == [float("-inf"), 1.0, 3.0, float("-inf")]
    # The grammar is complete and allows only the end token, which min_new_tokens holds back: the end stays possible.
    only_end = torch.tensor([False, False, False, True])
    held = adjust_logits(row, Sampling(min_new_tokens=5), [], frozenset({3}), only_end)
    assert held.tolist() == [float("-inf"), float("-inf"), float("-inf"), -1.0]


def test_a_byte_level_vocabulary_reaches_llguidance_as_its_bytes() -> None:
    """The packaged SmolLM2's GGUF-converted tokenizer.json reads to llguidance as SentencePiece: ``Ġ`` would be a
    letter. Handed over token by token, ' "' is a space and a quote."""
    from workers.engine.packaged_model import model_dir
    from workers.engine.tokenizer import HFTokenizer
    from infra.local.settings import LocalInfraSettings

    hf = HFTokenizer(model_dir(from_env(LocalInfraSettings).cache_dir))
    vocab = grammar.hf_tokenizer(hf.hf, hf.eos_ids)
    for text in (' "', '{"name": "Zoë"}', "\n\n"):
        ids = hf.encode(text)
        assert vocab.decode_bytes(ids) == text.encode("utf-8")
    assert vocab.is_special_token(hf.encode("<|im_end|>")[0])


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("json_schema", "{not json", "json_schema cannot be read"),
        ("json_schema", "[1, 2]", "json_schema cannot be read"),
        ("regex", "[a-z", "unclosed character class"),
        ("ebnf", "root ::= (", "ebnf cannot be read"),
    ],
)
def test_a_grammar_that_cannot_be_compiled_is_refused(kind: str, text: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(message)) as err:
        grammar.definition(Grammar(kind, text))
    assert str(err.value).startswith("Invalid grammar request: ")


# ------------------------------------------------------------ the random model: the mechanics, fast


@pytest.fixture(scope="module")
async def random_engine() -> AsyncIterator[TorchBackend]:
    backend = TorchBackend(engine_settings("random", max_batch=4))
    await backend.start()
    yield backend
    await backend.stop()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_noise_from_the_random_model_still_matches_a_regex_and_ends_with_it(random_engine: TorchBackend, temperature: float) -> None:
    done = await run(random_engine, f"re-{temperature}", "x", regex="[a-c]{3}-[0-9]{2}", max_new_tokens=50, temperature=temperature, sampling_seed=3)
    assert re.fullmatch("[a-c]{3}-[0-9]{2}", done.text), done.text
    assert done.finish_reason == protocol.finish_stop_token(done.output_ids[-1]) and done.completion_tokens == 6


async def test_an_ebnf_grammar_constrains_the_random_model(random_engine: TorchBackend) -> None:
    done = await run(random_engine, "ebnf", "x", ebnf='root ::= "yes" | "no" | "maybe " [0-9]', max_new_tokens=20, temperature=1.0, sampling_seed=7)
    assert re.fullmatch(r"yes|no|maybe [0-9]", done.text) and done.finish_reason is not None and done.finish_reason["type"] == "stop"


async def test_a_bad_grammar_is_refused_at_submit_as_a_400(random_engine: TorchBackend) -> None:
    gen = protocol.parse_generate({"text": "x", "sampling_params": {"json_schema": '{"type": "object", "minProperties": "x"}'}})
    with pytest.raises(InvalidRequest, match="^Invalid grammar request: json_schema"):
        random_engine.submit(gen)


async def test_a_model_whose_tokenizer_llguidance_cannot_read_refuses_grammars_by_name() -> None:
    backend = TorchBackend(engine_settings("random", max_batch=1))
    await backend.start()
    try:
        backend._model = replace(backend._model, grammar_vocab=None)  # type: ignore[arg-type]  # as _local_model leaves it
        gen = protocol.parse_generate({"text": "x", "sampling_params": {"regex": "a+"}})
        with pytest.raises(InvalidRequest, match="sampling param 'regex' is not supported by Parley's CPU engine for this model"):
            backend.submit(gen)
        plain = await run(backend, "plain", "x", max_new_tokens=2, ignore_eos=True)  # the model still serves
        assert plain.completion_tokens == 2
    finally:
        await backend.stop()


# ------------------------------------------------------------ the packaged SmolLM2: valid JSON, greedy or sampled


@pytest.fixture(scope="module")
async def smollm2() -> AsyncIterator[TorchBackend]:
    backend = TorchBackend(engine_settings("torch", max_batch=4))
    await backend.start()
    yield backend
    await backend.stop()


def chatml(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    ("schema", "question"),
    [
        (WEATHER, "What is the weather in Paris this week?"),
        (PERSON, "Describe a person who lives in Berlin."),
        (CALLS, "Call the weather tool for Tokyo."),
    ],
    ids=["enum-and-array", "nested-objects", "tool-call-array"],
)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_smollm2_writes_json_valid_against_the_schema(smollm2: TorchBackend, schema: dict, question: str, temperature: float) -> None:
    done = await run(
        smollm2, f"smol-{id(schema)}-{temperature}", chatml(question),
        json_schema=json.dumps(schema), max_new_tokens=200, temperature=temperature, sampling_seed=11,
    )
    jsonschema.validate(json.loads(done.text), schema)
    # It ends where the JSON does: on its last token, not at the length cap.
    assert done.finish_reason == protocol.finish_stop_token(done.output_ids[-1]) and done.completion_tokens < 200, done
    if schema is CALLS:  # the worker reads the call, its arguments valid against the function's schema
        [call] = JSON_CALLS.parse(done.text) or []
        assert call.name == "get_weather"
        jsonschema.validate(json.loads(call.arguments), WEATHER)


# ------------------------------------------------------------ the synthetic backend: a sentence of the grammar


def synthetic() -> SyntheticBackend:
    return SyntheticBackend(engine_settings("synthetic", synthetic_ttft_ms=0.0, synthetic_tokens_per_s=10_000.0))


def scripted(reply: str) -> str:
    return "[[reply:" + base64.urlsafe_b64encode(reply.encode()).decode().rstrip("=") + "]]"


@pytest.mark.parametrize("schema", [WEATHER, PERSON, CALLS], ids=["enum-and-array", "nested-objects", "tool-call-array"])
async def test_synthetic_replies_are_valid_against_the_schema_and_fixed_by_the_prompt(schema: dict) -> None:
    backend = synthetic()
    first = await run(backend, "a", "some prompt", json_schema=json.dumps(schema), max_new_tokens=500)
    again = await run(backend, "b", "some prompt", json_schema=json.dumps(schema), max_new_tokens=500)
    jsonschema.validate(json.loads(first.text), schema)
    assert first.text == again.text and first.finish_reason is not None and first.finish_reason["type"] == "stop"


async def test_synthetic_keeps_a_scripted_reply_the_grammar_accepts_and_replaces_one_it_does_not() -> None:
    backend = synthetic()
    valid = '{"city": "Paris", "unit": "celsius", "days": [1]}'
    kept = await run(backend, "k", "q " + scripted(valid), json_schema=json.dumps(WEATHER), max_new_tokens=100)
    assert kept.text == valid
    replaced = await run(backend, "r", "q " + scripted('{"city": "Paris"}'), json_schema=json.dumps(WEATHER), max_new_tokens=100)
    jsonschema.validate(json.loads(replaced.text), WEATHER)
    assert "Paris" not in replaced.text
    matched = await run(backend, "m", "q", regex="[A-Z][a-z]{2,5}@[a-z]+\\.org", max_new_tokens=100)
    assert re.fullmatch("[A-Z][a-z]{2,5}@[a-z]+\\.org", matched.text)


async def test_synthetic_refuses_a_grammar_it_cannot_read() -> None:
    gen = protocol.parse_generate({"text": "x", "sampling_params": {"regex": "(unclosed"}})
    with pytest.raises(InvalidRequest, match="^Invalid grammar request: regex"):
        synthetic().submit(gen)


# ------------------------------------------------------------ structural tags: free text, strict calls

STRICT = Tools(functions=[ToolFunction(name="get_weather", parameters=json.dumps(WEATHER), strict=True), ToolFunction(name="noop")])
TAG = Grammar("structural_tag", structural_tag(STRICT, HERMES) or "")


def test_a_structural_tag_takes_free_text_and_holds_each_call_it_opens_to_its_functions_schema() -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": [1]}}\n</tool_call>'
    assert grammar.accepts(TAG, "Just words, no call.")
    assert grammar.accepts(TAG, "Let me look.\n" + call)
    assert grammar.accepts(TAG, call + "\n" + call.replace("Paris", "Oslo"))  # parallel calls
    assert not grammar.accepts(TAG, "Let me look.\n" + call.replace(', "days": [1]', ""))  # a required argument missing
    assert not grammar.accepts(TAG, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')  # not offered
    # A function that is not strict: its arguments are an object, no more.
    assert grammar.accepts(TAG, '<tool_call>\n{"name": "noop", "arguments": {"anything": [1, 2]}}\n</tool_call>')


@pytest.mark.parametrize("text", ["[]", '{"structures": [], "triggers": ["<x>"]}', '{"structures": [{"begin": "<a>", "schema": {}, "end": ""}], "triggers": ["<b>"]}'])
def test_a_structural_tag_that_cannot_be_read_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="Invalid grammar request: structural_tag"):
        grammar.definition(Grammar("structural_tag", text))



async def test_smollm2_writes_the_same_free_text_under_a_structural_tag_when_it_calls_nothing(smollm2: TorchBackend) -> None:
    """The tag holds only what follows a trigger: a reply that opens no call is the model's own, token for token."""
    prompt = chatml("What is the weather in Paris for the next 2 days, in celsius?")
    free = await run(smollm2, "free", prompt, max_new_tokens=40, temperature=0.0)
    tagged = await run(smollm2, "tagged", prompt, structural_tag=TAG.text, max_new_tokens=40, temperature=0.0)
    assert "<tool_call>" not in free.text and tagged.output_ids == free.output_ids


async def test_synthetic_keeps_a_scripted_call_a_structural_tag_accepts() -> None:
    call = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": [2]}}\n</tool_call>'
    kept = await run(synthetic(), "s", "q " + scripted(call), structural_tag=TAG.text, max_new_tokens=200)
    assert kept.text == call
