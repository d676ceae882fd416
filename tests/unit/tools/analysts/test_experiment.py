"""`parley report --experiment`: the statistics (a known difference is found, identical arms show none),
the comparison over turn records, and its Markdown."""

from __future__ import annotations

import random
import uuid

import pytest

from tools.analysts import experiment as ex
from tools.analysts import report


@pytest.mark.parametrize("df, expected", [(5, 2.5706), (10, 2.2281), (30, 2.0423), (1000, 1.9623)])
def test_the_t_quantile_matches_the_tables(df: float, expected: float) -> None:
    assert ex.t_quantile(0.975, df) == pytest.approx(expected, abs=2e-3)


def _users(values: list[float]) -> list[list[float]]:
    return [[v] for v in values]  # one turn per user: the plain, unclustered case


def test_with_one_turn_per_user_the_mean_and_its_variance_are_the_textbook_ones() -> None:
    values = [1.0, 2.0, 4.0, 7.0]
    mean, var, n = ex.clustered_mean(_users(values))  # type: ignore[misc]
    s2 = sum((v - 3.5) ** 2 for v in values) / 3
    assert (mean, n) == (3.5, 4) and var == pytest.approx(s2 / 4)


def test_welch_finds_a_known_difference_and_its_interval_excludes_zero() -> None:
    rng = random.Random(1)
    slow = [rng.gauss(300, 40) for _ in range(60)]
    fast = [rng.gauss(200, 40) for _ in range(60)]
    d = ex.welch(_users(slow), _users(fast))
    assert d is not None and not d.covers_zero and d.low < 100 < d.high and 70 < d.low < d.estimate < d.high < 140
    assert ex.verdict(d) == "higher"


def test_identical_samples_show_no_difference() -> None:
    rng = random.Random(2)
    a = _users([rng.gauss(200, 40) for _ in range(60)])
    for interval in (ex.welch(a, list(a)), ex.bootstrap_median(a, list(a))):
        assert interval is not None and interval.covers_zero and interval.estimate == 0
        assert ex.verdict(interval) == "no detectable difference"


def test_two_draws_of_one_distribution_usually_show_no_difference() -> None:
    # 95% intervals: about 5 in 100 pairs of equal arms look different. Fixed seeds: 100 pairs, at most 10.
    wrong = 0
    for seed in range(100):
        rng = random.Random(seed)
        a, b = [rng.gauss(200, 40) for _ in range(40)], [rng.gauss(200, 40) for _ in range(40)]
        wrong += not ex.welch(_users(a), _users(b)).covers_zero  # type: ignore[union-attr]
    assert wrong <= 10


def _clustered(rng: random.Random, users: int, turns: int) -> list[list[float]]:
    """Each user's turns share a user effect (their moment's load, their prompts): correlated within a user."""
    out = []
    for _ in range(users):
        effect = rng.gauss(0, 60)
        out.append([200 + effect + rng.gauss(0, 10) for _ in range(turns)])
    return out


def test_users_are_the_unit_so_correlated_turns_do_not_fake_a_difference() -> None:
    wrong_by_user = wrong_by_turn = 0
    for seed in range(60):
        rng = random.Random(seed)
        a, b = _clustered(rng, 15, 8), _clustered(rng, 15, 8)
        wrong_by_user += not ex.welch(a, b).covers_zero  # type: ignore[union-attr]
        flat_a, flat_b = _users([v for g in a for v in g]), _users([v for g in b for v in g])
        wrong_by_turn += not ex.welch(flat_a, flat_b).covers_zero  # type: ignore[union-attr]
    assert wrong_by_user <= 7  # about 5% of 60
    assert wrong_by_turn > 15  # turns taken as independent: far too many false differences


def test_the_bootstrap_is_deterministic_and_finds_a_median_shift() -> None:
    rng = random.Random(3)
    a = _users([rng.expovariate(1 / 100) + 400 for _ in range(80)])
    b = _users([rng.expovariate(1 / 100) + 200 for _ in range(80)])
    first, again = ex.bootstrap_median(a, b), ex.bootstrap_median(a, b)
    assert first == again and first is not None and not first.covers_zero and first.low > 100


def test_shares_a_clear_gap_and_none() -> None:
    gap = ex.welch(_users([1.0] * 80 + [0.0] * 20), _users([1.0] * 40 + [0.0] * 60))
    assert gap is not None and not gap.covers_zero and gap.estimate == pytest.approx(0.4)
    same = ex.welch(_users([1.0] * 40 + [0.0] * 60), _users([0.0] * 60 + [1.0] * 40))
    assert same is not None and same.covers_zero


def test_too_few_values_give_no_interval() -> None:
    assert ex.welch([[1.0]], [[1.0], [2.0]]) is None and ex.bootstrap_median([], [[1.0]]) is None
    assert ex.verdict(None) == "too few turns"


def _turns(arm: str, n: int, ttft: float, rng: random.Random, *, up: float = 0.5, regenerate: float = 0.0) -> list[dict]:
    out = []
    for i in range(n):
        mid, at = str(uuid.uuid4()), rng.randrange(10**9)
        t = {
            "request_id": str(uuid.uuid4()), "conversation_id": str(uuid.uuid4()), "user_id": f"{arm}-u{i % 20}",
            "user_message_id": mid, "user_parent_id": None, "kind": "message", "requested_at": at,
            "experiment": "exp", "arm": arm, "pool": "small", "model": "m", "cache": "miss", "ttft_ms": rng.gauss(ttft, 30),
            "prompt_tokens": 100, "cached_tokens": 0, "completion_tokens": 50, "finish_reason": "stop",
            "feedback": "up" if rng.random() < up else "down",
        }
        out.append(t)
        if rng.random() < regenerate:  # asked again for another reply to the same message
            out.append({**t, "request_id": str(uuid.uuid4()), "kind": "regenerate", "requested_at": at + 1, "feedback": None})
    return out


def test_compare_reports_the_slow_arms_ttft_difference_and_no_difference_elsewhere() -> None:
    rng = random.Random(4)
    records = _turns("control", 80, 200, rng) + _turns("slow", 80, 500, rng)
    records.append({**records[0], "request_id": "other", "experiment": "another"})  # not this experiment's
    r = ex.compare(records, "exp", report.DEFAULT_PRICES)
    assert r.baseline == "control" and r.arms == {"control": 80, "slow": 80} and r.users == {"control": 20, "slow": 20}
    by = {m.name: m for m in r.metrics}
    mean = by["TTFT, mean"].differences["slow"]
    assert mean is not None and not mean.covers_zero and mean.low > 250
    median = by["TTFT, median"].differences["slow"]
    assert median is not None and median.low > 250
    assert by["completion tokens per turn"].differences["slow"].covers_zero  # type: ignore[union-attr]
    assert by["cost per 1,000 turns"].differences["slow"].covers_zero  # type: ignore[union-attr]
    text = ex.markdown(r)
    assert "| TTFT, mean (ms) | slow | 80 |" in text and "| higher |" in text
    assert "| completion tokens per turn (tokens) | slow | 80 | 50.0 | 0.0 | [0.0, 0.0] | no detectable difference |" in text


def test_identical_arms_report_no_difference_in_ttft() -> None:
    rng = random.Random(5)
    r = ex.compare(_turns("a", 80, 200, rng) + _turns("b", 80, 200, rng), "exp", report.DEFAULT_PRICES)
    assert r.baseline == "a"  # no arm named control: the first by name
    by = {m.name: m for m in r.metrics}
    assert by["TTFT, mean"].differences["b"].covers_zero  # type: ignore[union-attr]
    assert "no detectable difference" in ex.markdown(r)


def test_feedback_and_regenerate_rates_are_compared() -> None:
    rng = random.Random(6)
    records = _turns("control", 150, 200, rng, up=0.8) + _turns("worse", 150, 200, rng, up=0.3, regenerate=0.5)
    by = {m.name: m for m in ex.compare(records, "exp", report.DEFAULT_PRICES).metrics}
    up = by["thumbs up share of rated turns"]
    assert up.differences["worse"].high < 0  # type: ignore[union-attr]
    regen = by["regenerate rate"]
    assert regen.arms["control"].value == 0 and regen.differences["worse"].low > 0  # type: ignore[union-attr]


def test_an_experiment_or_baseline_not_in_the_file_is_an_error_that_says_so() -> None:
    records = _turns("control", 3, 200, random.Random(7))
    with pytest.raises(ValueError, match="no turn of experiment 'nope'"):
        ex.compare(records, "nope", report.DEFAULT_PRICES)
    with pytest.raises(ValueError, match="arm 'treatment' has no turns"):
        ex.compare(records, "exp", report.DEFAULT_PRICES, baseline="treatment")
