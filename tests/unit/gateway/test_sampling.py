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
