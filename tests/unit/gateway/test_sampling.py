"""Sampling parameters read once for both APIs, and what the OpenAI endpoint refuses by name."""

from __future__ import annotations

import json

import pytest

from gateway.errors import ApiError
from gateway.openai_request import parse_request
from gateway.sampling import json_schema_of, parse_sampling
from schemas.events import Sampling


class Refused(Exception):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def test_every_field_travels_and_absent_ones_are_the_pools_default() -> None:
    asked = {"temperature": 0, "top_p": 0.9, "seed": 7, "stop": "END", "presence_penalty": -1, "frequency_penalty": 0.5}
    assert parse_sampling(asked, Refused) == Sampling(
        temperature=0.0, top_p=0.9, seed=7, stop=["END"], presence_penalty=-1.0, frequency_penalty=0.5
    )
    assert parse_sampling({}, Refused) == Sampling() and parse_sampling({"temperature": None}, Refused) == Sampling()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**63}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_field(fields: dict, named: str) -> None:
    with pytest.raises(Refused) as caught:
        parse_sampling(fields, Refused, prefix="sampling.")
    assert caught.value.field == f"sampling.{named}" and named in str(caught.value)


def test_response_format_becomes_the_json_schema_the_engine_constrains_to() -> None:
    assert json_schema_of(None, Refused) is None and json_schema_of({"type": "text"}, Refused) is None
    assert json.loads(json_schema_of({"type": "json_object"}, Refused) or "") == {"type": "object"}
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    given = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}
    assert json.loads(json_schema_of(given, Refused) or "") == schema
    for bad in ({"type": "yaml"}, {"type": "json_schema"}, "json"):
        with pytest.raises(Refused):
            json_schema_of(bad, Refused)


BASE = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def test_the_openai_request_carries_its_sampling_and_structured_output() -> None:
    chat = parse_request({**BASE, "temperature": 0, "seed": 3, "stop": ["\n\n"], "response_format": {"type": "json_object"}}, 1000)
    assert (chat.sampling.temperature, chat.sampling.seed, chat.sampling.stop) == (0.0, 3, ["\n\n"])
    assert chat.sampling.json_schema == '{"type": "object"}'


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"functions": [{"name": "f"}]}, "functions"),  # the API before `tools`
        ({"frobnicate": 1}, "frobnicate"),
        ({"n": 2}, "n"),
    ],
)
def test_what_parley_does_not_take_is_a_400_naming_it(extra: dict, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_request({**BASE, **extra}, 1000)
    assert caught.value.status == 400 and caught.value.param == param and caught.value.code == "unsupported_parameter"


def test_the_neutral_values_clients_send_by_default_are_taken() -> None:
    neutral = {"logprobs": False, "tools": [], "tool_choice": "auto", "store": True, "n": 1, "logit_bias": None}
    assert parse_request({**BASE, **neutral}, 1000).sampling == Sampling()


# ------------------------------------------------------------------ SGLang's and vLLM's extensions (what benchmarks send)

EXTENSIONS = {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True, "stop_token_ids": [7, 2, 7], "min_tokens": 8}


def test_the_extensions_travel_and_no_cut_is_unset() -> None:
    assert parse_sampling(EXTENSIONS, Refused) == Sampling(
        top_k=40, min_p=0.05, repetition_penalty=1.1, ignore_eos=True, stop_token_ids=[2, 7], min_tokens=8
    )
    # -1 (SGLang's) and 0 (vLLM's) ask for no top-k cut, as the defaults benchmark clients send; min_tokens 0 is none.
    assert parse_sampling({"top_k": -1, "min_tokens": 0, "ignore_eos": False}, Refused) == Sampling()
    assert parse_sampling({"top_k": 0}, Refused) == Sampling()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"top_k": -2}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"repetition_penalty": 2.5}, "repetition_penalty"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
        ({"stop_token_ids": 5}, "stop_token_ids"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"stop_token_ids": [True]}, "stop_token_ids"),
        ({"stop_token_ids": list(range(65))}, "stop_token_ids"),
        ({"min_tokens": -1}, "min_tokens"),
    ],
)
def test_an_extension_out_of_range_is_refused_naming_its_field(fields: dict, named: str) -> None:
    with pytest.raises(Refused) as caught:
        parse_sampling(fields, Refused, prefix="sampling.")
    assert caught.value.field == f"sampling.{named}" and named in str(caught.value)


def test_the_openai_endpoint_takes_the_extensions_at_the_top_level_as_vllm_and_sglang_do() -> None:
    # The openai SDK's extra_body lands its keys here, beside OpenAI's own.
    chat = parse_request({**BASE, "max_tokens": 64, **EXTENSIONS}, 1000)
    assert (chat.sampling.top_k, chat.sampling.ignore_eos, chat.sampling.stop_token_ids, chat.sampling.min_tokens) == (40, True, [2, 7], 8)
    with pytest.raises(ApiError) as bad:
        parse_request({**BASE, "repetition_penalty": 3}, 1000)
    assert (bad.value.status, bad.value.param) == (400, "repetition_penalty")
    with pytest.raises(ApiError) as over:
        parse_request({**BASE, "max_tokens": 4, "min_tokens": 5}, 1000)
    assert (over.value.status, over.value.param) == (400, "min_tokens")
    # What neither Parley nor the engines honour stays a 400 naming it.
    with pytest.raises(ApiError) as unknown:
        parse_request({**BASE, "best_of": 2}, 1000)
    assert (unknown.value.param, unknown.value.code) == ("best_of", "unsupported_parameter")


def test_the_native_sampling_object_takes_them_too() -> None:
    from gateway.conversations import turn_options
    from gateway.errors import Unprocessable

    sampling, max_tokens = turn_options({"sampling": EXTENSIONS, "max_tokens": 100})
    assert (sampling.top_k, sampling.min_tokens, max_tokens) == (40, 8, 100)
    with pytest.raises(Unprocessable, match="sampling.min_tokens"):
        turn_options({"sampling": {"min_tokens": 200}, "max_tokens": 100})
    with pytest.raises(Unprocessable, match="sampling.best_of"):
        turn_options({"sampling": {"best_of": 2}})
