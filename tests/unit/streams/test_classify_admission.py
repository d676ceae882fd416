"""The routing classifier and admission control, table-driven."""

from __future__ import annotations

import pytest

from streams.admission import Admit, AdmissionConfig, Load, Shed, admit
from streams.classify import classify, escalate, features


@pytest.mark.parametrize(
    "text, context, documents, pool",
    [
        ("hi!", 0, 0, "small"),
        ("What's the capital of France?", 0, 0, "small"),
        ("Why does my code fail?\n```python\ndef f(x):\n    return x/0\n```", 0, 0, "medium"),
        ("Prove the theorem step by step and explain why each lemma holds: \\int_0^1 x^2 dx = 1/3", 0, 0, "frontier"),
        ("Compare these reports and analyze the trade-offs", 0, 3, "frontier"),
        ("Summarize this", 0, 1, "small"),
        ("x" * 2000, 0, 0, "medium"),
    ],
)
def test_the_cheapest_pool_that_clears_the_bar(text: str, context: int, documents: int, pool: str) -> None:
    assert classify(features(text, context, documents)) == pool


@pytest.mark.parametrize(
    "current, wanted, result",
    [(None, "small", "small"), ("small", "medium", "medium"), ("frontier", "small", "frontier"), ("medium", "small", "medium")],
)
def test_escalation_is_one_way(current: str | None, wanted: str, result: str) -> None:
    assert escalate(current, wanted) == result


CFG = AdmissionConfig(busy=0.8, queue_limit=1.25, paid_limit=2.0, retry_after_s=10)


def loads(small: float, medium: float, frontier: float) -> dict[str, Load]:
    return {"small": Load(small * 10, 10), "medium": Load(medium * 10, 10), "frontier": Load(frontier * 10, 10)}


@pytest.mark.parametrize(
    "tier, pool, pressure, expected",
    [
        ("free", "medium", (0.1, 0.5, 0.1), Admit("medium")),
        ("free", "medium", (0.1, 0.9, 0.1), Admit("small", downgraded_from="medium")),
        ("free", "frontier", (0.1, 0.9, 0.95), Admit("small", downgraded_from="frontier")),
        ("free", "frontier", (0.9, 0.5, 0.95), Admit("medium", downgraded_from="frontier")),
        ("free", "medium", (0.9, 1.0, 0.1), Admit("medium", queued=True)),
        ("free", "small", (1.1, 0.1, 0.1), Admit("small", queued=True)),
        ("free", "small", (1.5, 0.1, 0.1), Shed("small", 15.0, "overloaded")),
        ("plus", "small", (1.5, 0.1, 0.1), Admit("small", queued=True)),
        ("enterprise", "small", (1.9, 0.1, 0.1), Admit("small", queued=True)),
        ("enterprise", "small", (2.5, 0.1, 0.1), Shed("small", 10.0, "paid_share_exhausted")),
    ],
)
def test_admission_by_tier(tier: str, pool: str, pressure: tuple[float, float, float], expected: object) -> None:
    assert admit(tier, pool, loads(*pressure), CFG) == expected


def test_a_pool_without_heartbeats_is_not_judged() -> None:
    assert admit("free", "small", {}, CFG) == Admit("small")


def test_retry_after_grows_with_overload_and_is_capped() -> None:
    mild = admit("free", "small", loads(1.3, 1, 1), CFG)
    severe = admit("free", "small", loads(9.0, 1, 1), CFG)
    assert isinstance(mild, Shed) and isinstance(severe, Shed)
    assert 10 <= mild.retry_after_s < severe.retry_after_s <= 60
