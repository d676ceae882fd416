"""The CPU engine's wire shapes against SGLang's (tests/fixtures/sglang)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.engine import protocol
from workers.engine.protocol import InvalidRequest, Progress

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "sglang"


def test_parse_generate_reads_the_worker_body() -> None:
    gen = protocol.parse_generate(
        {"text": "hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0, "top_p": 0.5, "stop": ["\n"]}, "stream": True, "rid": "r1"}
    )
    assert (gen.rid, gen.text, gen.stream) == ("r1", "hi", True)
    assert (gen.sampling.max_new_tokens, gen.sampling.greedy, gen.sampling.top_p, gen.sampling.stop) == (4, True, 0.5, ("\n",))
    defaults = protocol.parse_generate({"text": "x"})
    assert defaults.sampling.max_new_tokens == 128 and not defaults.stream and len(defaults.rid) == 32
    assert protocol.parse_generate({"text": "x", "sampling_params": {"stop": "END"}}).sampling.stop == ("END",)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Either text, input_ids or input_embeds"),
        ({"text": ["a", "b"]}, "one prompt per request"),
        ({"input_ids": [1, 2]}, "text` prompts only"),
        ({"text": "x", "sampling_params": {"temperature": -1}}, "temperature must be a non-negative finite number"),
        ({"text": "x", "sampling_params": {"top_p": 0}}, r"top_p must be in \(0, 1\]"),
        ({"text": "x", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens must be at least 0"),
        ({"text": "x", "sampling_params": {"bogus": 1}}, "Unknown sampling parameter.*bogus"),
        ({"text": "x", "rid": 5}, "rid"),
    ],
)
def test_parse_generate_refuses_like_sglang(body: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        protocol.parse_generate(body)


def test_sglang_params_at_their_neutral_value_pass() -> None:
    assert protocol.parse_generate({"text": "x", "sampling_params": {"frequency_penalty": 0.1, "n": 1}}).text == "x"


def test_context_check_uses_sglangs_message() -> None:
    protocol.check_context(9, 10)
    with pytest.raises(InvalidRequest) as err:
        protocol.check_context(10, 10)
    assert str(err.value) == "The input (10 tokens) is longer than the model's context length (10 tokens)."


def test_output_has_sglangs_shape() -> None:
    recorded = json.loads((FIXTURES / "generate_nonstream.json").read_text())
    ours = protocol.output("r1", "ab", (1, 2), Progress("b", (2,), 2, 5, 0, protocol.finish_length(2)), e2e_latency=0.1)
    assert set(ours) == set(recorded)
    # Every meta_info field the engine sends is one SGLang sends, with the same type.
    for key, value in ours["meta_info"].items():
        assert key in recorded["meta_info"], key
        assert type(value) is type(recorded["meta_info"][key]), key
    assert ours["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
    assert ours["meta_info"]["completion_tokens"] == 2
    streaming = protocol.output("r1", "a", (1,), Progress("a", (1,), 1, 5, 0, None))
    assert streaming["meta_info"]["finish_reason"] is None and "e2e_latency" not in streaming["meta_info"]


def test_finish_reasons_are_sglangs_to_json() -> None:
    assert protocol.finish_stop_str("\n") == {"type": "stop", "matched": "\n"}
    assert protocol.finish_stop_token(2) == {"type": "stop", "matched": 2}
    assert protocol.finish_abort() == {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    assert protocol.error_body("m") == json.loads((FIXTURES / "error_400.json").read_text()) | {"error": {"message": "m"}}
