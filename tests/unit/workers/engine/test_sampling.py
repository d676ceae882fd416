"""SGLang's sampling params in the CPU engine: each one either applied as SGLang applies it, or refused by
name unless sent at its neutral value; never accepted and ignored."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
import torch
from starlette.testclient import TestClient

from parley.settings import from_env
from workers.engine import protocol
from workers.engine.app import create_app
from workers.engine.batcher import TorchBackend
from workers.engine.protocol import Grammar, InvalidRequest, Progress, Sampling, parse_sampling
from workers.engine.settings import EngineSettings
from workers.engine.synthetic import NO_EFFECT, SyntheticBackend, synthetic_pieces
from workers.engine.tokenizer import ByteTokenizer, WordTokenizer
from workers.engine.torch_model import adjust_logits, request_generator, sample

# ------------------------------------------------------------ parsing and refusals


def test_every_sglang_param_is_either_implemented_or_refused_unless_neutral() -> None:
    assert protocol.IMPLEMENTED | set(protocol.UNSUPPORTED) == protocol.SGLANG_SAMPLING_KEYS
    assert not protocol.IMPLEMENTED & set(protocol.UNSUPPORTED)


def test_null_means_the_default_for_every_param_as_in_sglang() -> None:
    # SGLang's SamplingParams.__post_init__ turns None into the default; clients send nulls.
    assert parse_sampling({k: None for k in protocol.SGLANG_SAMPLING_KEYS}) == Sampling()


@pytest.mark.parametrize(
    "neutral",
    [
        {"n": 1},
        {"n": 1.0},
        {"json_schema": None, "regex": None, "ebnf": None, "structural_tag": None},
        {"stop_regex": []},
        {"stop_regex": ""},
        {"custom_params": {}},
        {"stream_interval": None},
        {"frequency_penalty": 0, "presence_penalty": 0, "min_new_tokens": 0, "min_p": 0, "logit_bias": None},
    ],
)
def test_defaults_clients_send_are_accepted(neutral: dict) -> None:
    assert parse_sampling(neutral) == Sampling()


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("n", 2, "one reply per request: send the request n times"),
        ("stop_regex", [r"\d+"], "stop strings are supported, stop regexes are not"),
        ("custom_params", {"k": 1}, "custom logit processors need SGLang"),
        ("stream_interval", 4, "the engine streams after every decode step"),
    ],
)
def test_unsupported_params_are_refused_by_name(name: str, value: object, why: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        protocol.parse_generate({"text": "x", "sampling_params": {name: value}})
    assert str(err.value) == f"sampling param {name!r} is not supported by Parley's CPU engine ({why})"


def test_a_grammar_is_read_as_sent_and_only_one_is_taken() -> None:
    assert parse_sampling({"json_schema": '{"type": "object"}'}).grammar == Grammar("json_schema", '{"type": "object"}')
    assert parse_sampling({"regex": "[a-z]+", "json_schema": None}).grammar == Grammar("regex", "[a-z]+")
    with pytest.raises(InvalidRequest, match=r"^Only one of regex, json_schema, or ebnf can be set\.$"):
        parse_sampling({"regex": "a", "ebnf": 'root ::= "a"'})
    with pytest.raises(InvalidRequest, match=r"^structural_tag cannot be set together with regex, json_schema or ebnf\.$"):
        parse_sampling({"structural_tag": "{}", "json_schema": "{}"})
    with pytest.raises(InvalidRequest, match="'json_schema' must be a string"):
        parse_sampling({"json_schema": {"type": "object"}})


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("return_logprob", True, "logprobs need SGLang"),
        ("top_logprobs_num", 5, "logprobs need SGLang"),
        ("image_data", "cat.png", "the CPU engine serves text models only"),
        ("lora_path", "adapter", "LoRA adapters need SGLang"),
        ("custom_logit_processor", "{}", "custom logit processors need SGLang"),
    ],
)
def test_unsupported_request_fields_are_refused_by_name(field: str, value: object, why: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        protocol.parse_generate({"text": "x", field: value})
    assert str(err.value) == f"request field {field!r} is not supported by Parley's CPU engine ({why})"
    defaults = {"return_logprob": False, "logprob_start_len": -1, "top_logprobs_num": 0, "image_data": None, "lora_path": None}
    assert protocol.parse_generate({"text": "x", **defaults}).text == "x"


def test_implemented_params_are_read() -> None:
    s = parse_sampling(
        {
            "min_p": 0.05, "frequency_penalty": 0.5, "presence_penalty": -0.25, "min_new_tokens": 3,
            "stop_token_ids": [7, None, 9], "logit_bias": {"5": 2.5, "1": -100}, "sampling_seed": 1234,
            "skip_special_tokens": False, "spaces_between_special_tokens": False, "max_new_tokens": 8,
        }
    )
    assert (s.min_p, s.frequency_penalty, s.presence_penalty, s.min_new_tokens) == (0.05, 0.5, -0.25, 3)
    assert s.stop_token_ids == frozenset({7, 9})  # SGLang drops nulls
    assert s.logit_bias == ((1, -100.0), (5, 2.5))
    assert (s.seed, s.skip_special_tokens, s.spaces_between_special_tokens) == (1234, False, False)
    assert parse_sampling({"sampling_seed": -1}).seed == -1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        # SGLang's SamplingParams.verify(), word for word.
        ({"temperature": float("inf")}, "temperature must be a non-negative finite number, got inf."),
        ({"min_p": 1.5}, r"min_p must be in [0, 1], got 1.5."),
        ({"top_k": 0}, "top_k must be -1 (disable) or at least 1, got 0."),
        ({"frequency_penalty": 2.5}, "frequency_penalty must be in [-2, 2], got 2.5."),
        ({"presence_penalty": -3}, "presence_penalty must be in [-2, 2], got -3.0."),
        ({"min_new_tokens": -1}, "min_new_tokens must be in [0, max_new_tokens], got -1."),
        ({"min_new_tokens": 9, "max_new_tokens": 8}, "min_new_tokens must be in [0, max_new_tokens(8)], got 9."),
        # Parley's own: SGLang has no check for these and fails later.
        ({"sampling_seed": 2**63}, f"sampling_seed must be a 64-bit integer, got {2**63}."),
        ({"sampling_seed": "7"}, "sampling_seed must be a 64-bit integer, got '7'."),
        ({"temperature": "hot"}, "sampling param 'temperature' must be a number, got 'hot'."),
        ({"top_k": 2.5}, "sampling param 'top_k' must be an integer, got 2.5."),
        ({"ignore_eos": "yes"}, "sampling param 'ignore_eos' must be true or false, got 'yes'."),
        ({"stop_token_ids": 5}, "sampling param 'stop_token_ids' must be a list of token ids, got 5."),
        ({"logit_bias": {"eos": 1}}, "logit_bias keys must be token ids, got 'eos'."),
        ({"logit_bias": {"3": "big"}}, "logit_bias values must be finite numbers, got 'big' for token 3."),
    ],
)
def test_bad_values_are_refused_with_sglangs_words(params: dict, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_sampling(params)
    assert str(err.value) == message


def test_logit_bias_keys_are_checked_against_the_vocabulary_as_sglang_does() -> None:
    protocol.check_logit_bias(parse_sampling({"logit_bias": {"258": 1.0}}), 259)
    with pytest.raises(InvalidRequest) as err:
        protocol.check_logit_bias(parse_sampling({"logit_bias": {"259": 1.0}}), 259)
    assert str(err.value) == "logit_bias must has keys in [0, 258], got 259."


# ------------------------------------------------------------ the sampler


def test_frequency_and_presence_penalties_over_generated_tokens() -> None:
    row = torch.zeros(4)
    out = adjust_logits(row, Sampling(frequency_penalty=0.5, presence_penalty=0.25), [1, 1, 1, 2], frozenset())
    # frequency once per occurrence, presence once per token seen; token 0 and 3 never generated.
    assert out.tolist() == [0.0, -1.75, -0.75, 0.0]
    assert row.tolist() == [0.0] * 4  # the caller's logits are left alone
    negative = adjust_logits(row, Sampling(frequency_penalty=-1.0), [3], frozenset())
    assert negative.tolist() == [0.0, 0.0, 0.0, 1.0]  # negative values encourage repeating


def test_min_new_tokens_masks_eos_and_stop_token_ids_until_reached() -> None:
    s = Sampling(temperature=0.0, min_new_tokens=2, stop_token_ids=frozenset({1}))
    logits = torch.tensor([[0.0, 5.0, 9.0, 1.0]])
    eos = frozenset({2})
    assert sample(logits, [s], [[]], [torch.Generator()], eos) == [3]
    assert sample(logits, [s], [[3]], [torch.Generator()], eos) == [3]
    assert sample(logits, [s], [[3, 3]], [torch.Generator()], eos) == [2]  # reached: EOS may end it


def test_logit_bias_is_added_to_the_logits() -> None:
    s = Sampling(temperature=0.0, logit_bias=((0, 10.0), (2, -100.0)))
    assert sample(torch.tensor([[0.0, 5.0, 9.0]]), [s], [[]], [torch.Generator()]) == [0]


def test_min_p_keeps_tokens_near_the_most_likely() -> None:
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    s = Sampling(min_p=0.4)  # threshold 0.24: only tokens 0 and 1 stay
    draws = {sample(logits, [s], [[]], [g])[0] for g in [torch.Generator().manual_seed(i) for i in range(200)]}
    assert draws == {0, 1}


def test_a_seeded_row_draws_the_same_whatever_it_is_batched_with() -> None:
    torch.manual_seed(1)
    vocab = 50
    steps = [torch.randn(3, vocab) for _ in range(12)]
    seeded = Sampling(temperature=1.0, seed=42)
    other = Sampling(temperature=1.3)

    def run(batch: bool) -> list[int]:
        own = request_generator(42)
        assert own is not None
        shared = torch.Generator().manual_seed(0)
        out: list[int] = []
        for logits in steps:
            if batch:  # the seeded request in the middle of two unseeded ones sharing the engine's generator
                tokens = sample(logits, [other, seeded, other], [[], out, []], [shared, own, shared])
                out.append(tokens[1])
            else:
                out.append(sample(logits[1:2], [seeded], [out], [own])[0])
        return out

    alone = run(batch=False)
    assert run(batch=True) == alone
    assert len(set(alone)) > 3  # really sampled, not argmax


# ------------------------------------------------------------ the torch batcher (random model)


def torch_settings(**kw: object) -> EngineSettings:
    return replace(from_env(EngineSettings, {}), backend="random", context_length=256, max_total_tokens=4096, **kw)


async def finish(backend: TorchBackend | SyntheticBackend, rid: str, text: str, **params: object) -> Progress:
    gen = protocol.parse_generate({"text": text, "rid": rid, "sampling_params": params})
    return protocol.joined([p async for p in backend.submit(gen).progress()])


@pytest.fixture
async def random_engine() -> TorchBackend:
    backend = TorchBackend(torch_settings(max_batch=4))
    await backend.start()
    yield backend
    await backend.stop()


async def test_same_seed_same_reply_alone_or_batched(random_engine: TorchBackend) -> None:
    params = {"max_new_tokens": 16, "temperature": 1.0, "ignore_eos": True, "sampling_seed": 7}
    alone = await finish(random_engine, "alone", "Tell me a story", **params)
    neighbours = [finish(random_engine, f"n{i}", f"noise {i}", max_new_tokens=20, temperature=1.0, ignore_eos=True) for i in range(3)]
    together, *_ = await asyncio.gather(finish(random_engine, "together", "Tell me a story", **params), *neighbours)
    assert together.output_ids == alone.output_ids and together.text == alone.text
    assert random_engine.load().internal["max_decode_batch_size"] >= 2
    others = [await finish(random_engine, f"s{seed}", "Tell me a story", **{**params, "sampling_seed": seed}) for seed in (8, 9)]
    assert any(o.output_ids != alone.output_ids for o in others)


async def test_stop_token_ids_end_the_reply_and_are_trimmed_unless_no_stop_trim(random_engine: TorchBackend) -> None:
    a = ord("A")
    forced = {"temperature": 0.0, "max_new_tokens": 8, "logit_bias": {str(a): 100.0}, "stop_token_ids": [a]}
    trimmed = await finish(random_engine, "t", "x", **forced)
    assert trimmed.finish_reason == protocol.finish_stop_token(a)
    assert (trimmed.output_ids, trimmed.text) == ((a,), "")
    kept = await finish(random_engine, "k", "x", **forced, no_stop_trim=True)
    assert (kept.output_ids, kept.text) == ((a,), "A")
    ignored = await finish(random_engine, "i", "x", **forced, ignore_eos=True)
    assert ignored.finish_reason == protocol.finish_length(8) and ignored.text == "A" * 8


async def test_min_new_tokens_holds_eos_back(random_engine: TorchBackend) -> None:
    eos = ByteTokenizer.EOS
    params = {"temperature": 0.0, "max_new_tokens": 20, "logit_bias": {str(eos): 100.0}}
    assert (await finish(random_engine, "e0", "x", **params)).output_ids == (eos,)
    held = await finish(random_engine, "e5", "x", **params, min_new_tokens=5)
    assert len(held.output_ids) == 6 and held.output_ids[-1] == eos
    assert held.finish_reason == protocol.finish_stop_token(eos)
    assert eos not in held.output_ids[:-1]


async def test_special_tokens_are_written_when_not_skipped(random_engine: TorchBackend) -> None:
    eos = ByteTokenizer.EOS
    params = {"temperature": 0.0, "max_new_tokens": 4, "logit_bias": {str(eos): 100.0}, "no_stop_trim": True}
    assert (await finish(random_engine, "sk", "x", **params)).text == ""
    assert (await finish(random_engine, "nsk", "x", **params, skip_special_tokens=False)).text == "</s>"


async def test_logit_bias_outside_the_vocabulary_is_refused(random_engine: TorchBackend) -> None:
    gen = protocol.parse_generate({"text": "x", "sampling_params": {"logit_bias": {"259": 1.0}}})
    with pytest.raises(InvalidRequest, match=r"logit_bias must has keys in \[0, 258\], got 259"):
        random_engine.submit(gen)


# ------------------------------------------------------------ synthetic backend and the HTTP face


def synthetic(**kw: object) -> SyntheticBackend:
    base = replace(from_env(EngineSettings, {}), backend="synthetic", synthetic_ttft_ms=0.0, synthetic_tokens_per_s=10_000.0)
    return SyntheticBackend(replace(base, **kw))


async def test_synthetic_applies_what_ends_the_reply_and_says_what_cannot_change_it() -> None:
    b = synthetic()
    await b.start()
    pieces = synthetic_pieces("q", 20)
    stop_id = WordTokenizer.piece_id(pieces[4])
    first = next(i for i, p in enumerate(pieces) if WordTokenizer.piece_id(p) == stop_id)
    stopped = await finish(b, "st", "q", max_new_tokens=20, stop_token_ids=[stop_id])
    assert stopped.finish_reason == protocol.finish_stop_token(stop_id)
    assert stopped.text == "".join(pieces[:first]) and len(stopped.output_ids) == first + 1
    # Token-choosing params are accepted; the text is fixed by the prompt.
    plain = await finish(b, "p", "q", max_new_tokens=20)
    tuned = await finish(b, "tu", "q", max_new_tokens=20, temperature=0.3, sampling_seed=5, frequency_penalty=1.0)
    assert tuned.text == plain.text
    assert b.sampling_applied == protocol.IMPLEMENTED - NO_EFFECT and "stop_token_ids" in b.sampling_applied


def test_server_info_lists_what_the_backend_does_with_each_param() -> None:
    with TestClient(create_app(synthetic())) as http:
        listed = http.get("/get_server_info").json()["parley_sampling_params"]
    assert set(listed["accepted_without_effect"]) == NO_EFFECT
    assert set(listed["applied"]) | NO_EFFECT == protocol.IMPLEMENTED
    assert set(listed["refused_unless_neutral"]) == set(protocol.UNSUPPORTED)


def test_a_refused_param_is_a_400_or_an_error_event_as_in_sglang() -> None:
    body = {"text": "x", "sampling_params": {"stop_regex": [r"\d+"]}}
    message = (
        "sampling param 'stop_regex' is not supported by Parley's CPU engine "
        "(stop strings are supported, stop regexes are not)"
    )
    with TestClient(create_app(synthetic())) as http:
        plain = http.post("/generate", json=body)
        assert (plain.status_code, plain.json()) == (400, {"error": {"message": message}})
        streamed = http.post("/generate", json={**body, "stream": True})
    assert streamed.status_code == 200  # SGLang validates inside the stream it started
    events = [line[len("data: ") :] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert [json.loads(events[0]), events[1]] == [{"error": {"message": message}}, "[DONE]"]


def test_a_row_whose_grammar_allows_nothing_gets_a_token_without_failing_the_batch() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    params = [Sampling(temperature=1.0), Sampling(temperature=1.0)]
    nothing, everything = torch.zeros(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool)
    tokens = sample(logits, params, [[], []], [torch.Generator().manual_seed(1)] * 2, frozenset(), [nothing, everything])
    assert len(tokens) == 2 and all(0 <= t < 3 for t in tokens)  # the first row's grammar then refuses its token
