from prometheus_client import REGISTRY

from parley.metrics import cache_outcome
from schemas.events import Usage
from workers.outcome import Outcome
from workers.telemetry import record_outcome


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_hit_is_half_the_prompt_or_more_from_the_cache():
    assert cache_outcome(0, 100) == "miss"
    assert cache_outcome(12, 100) == "miss"  # the system prompt alone
    assert cache_outcome(50, 100) == "hit"
    assert cache_outcome(0, 0) == "miss"


def test_a_reply_adds_its_ttft_gap_and_tokens_under_its_cache_outcome():
    labels = {"pool": "unit", "model": "m-metrics"}
    before = sample("parley_ttft_seconds_count", **labels, cache="hit")
    gaps_before = sample("parley_inter_token_seconds_sum", **labels, cache="hit")
    outcome = Outcome("stop", usage=Usage(prompt_tokens=100, cached_tokens=80, completion_tokens=11), ttft_ms=200, duration_ms=1200)
    record_outcome(outcome, pool="unit", model="m-metrics", new_tokens=11)
    assert sample("parley_ttft_seconds_count", **labels, cache="hit") == before + 1
    assert abs(sample("parley_inter_token_seconds_sum", **labels, cache="hit") - gaps_before - 0.1) < 1e-9  # 1 s / 10 gaps
    assert sample("parley_generated_tokens_total", **labels) >= 11
    assert sample("parley_replies_total", **labels, finish_reason="stop") >= 1


def test_a_reply_without_tokens_counts_its_end_but_no_latency():
    labels = {"pool": "unit", "model": "m-empty"}
    record_outcome(Outcome("cancelled"), pool="unit", model="m-empty", new_tokens=0)
    assert sample("parley_replies_total", **labels, finish_reason="cancelled") == 1
    assert sample("parley_ttft_seconds_count", **labels, cache="miss") == 0
