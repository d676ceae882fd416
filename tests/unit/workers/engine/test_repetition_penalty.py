"""SGLang's repetition_penalty in the CPU engine's sampler: generated tokens only, divide positive logits,
multiply negative ones; the same range check as SGLang."""

from __future__ import annotations

import pytest
import torch

from workers.engine import protocol
from workers.engine.protocol import InvalidRequest, Sampling
from workers.engine.torch_model import penalise_repetition, sample


def test_seen_tokens_are_pushed_down_whichever_their_sign() -> None:
    row = torch.tensor([2.0, -2.0, 1.0, 0.5])
    out = penalise_repetition(row, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, 0.5]
    assert row.tolist() == [2.0, -2.0, 1.0, 0.5]  # the caller's logits are left alone
    assert penalise_repetition(row, [0], 1.0) is row and penalise_repetition(row, [], 2.0) is row


def test_greedy_sampling_moves_off_a_penalised_token() -> None:
    logits = torch.tensor([[3.0, 2.0, 0.0], [3.0, 2.0, 0.0]])
    params = [Sampling(temperature=0.0), Sampling(temperature=0.0, repetition_penalty=2.0)]
    assert sample(logits, params, [[0], [0]], [torch.Generator().manual_seed(0)] * 2) == [0, 1]


def test_parsed_and_checked_like_sglang() -> None:
    assert protocol.parse_sampling({"repetition_penalty": 1.2}).repetition_penalty == 1.2
    assert protocol.parse_sampling({"repetition_penalty": None}).repetition_penalty == 1.0
    assert protocol.parse_sampling({}).repetition_penalty == 1.0
    assert "repetition_penalty" in protocol.IMPLEMENTED
    for bad in (0, 2.5, -1):
        with pytest.raises(InvalidRequest, match=r"repetition_penalty must be in \(0, 2\]"):
            protocol.parse_sampling({"repetition_penalty": bad})
