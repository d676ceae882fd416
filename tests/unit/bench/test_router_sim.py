"""bench.router_sim's limits: physical limit >= capacity bound >= what any policy achieves, on both trace shapes."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from bench.router_sim import POLICIES, TRACES, capacity_bound, simulate, sticky_hash
from bench.router_traces import BURST_SHAPE, physical_limit

RUNS = [(name, "lru") for name in POLICIES] + [("parley", "belady")]


@pytest.mark.parametrize("shape", sorted(TRACES))
def test_no_policy_beats_the_capacity_bound_nor_the_bound_the_physical_limit(shape: str) -> None:
    trace = TRACES[shape](150, 3)
    limit = physical_limit(trace)
    bounds = []
    for name, evict in RUNS:
        result = simulate(POLICIES[name](3), trace, replicas=3, slots=2, cache_tokens=4000, evict=evict)
        assert result.hit_rate <= result.bound + 1e-12 <= limit + 2e-12, (name, evict)
        bounds.append(result.bound)
    assert max(bounds) < limit - 0.05  # the cache is small enough here for the bound to bite


@pytest.mark.parametrize("shape", sorted(TRACES))
def test_with_caches_that_never_fill_sticky_placement_reaches_the_physical_limit(shape: str) -> None:
    trace = TRACES[shape](150, 3)
    result = simulate(sticky_hash(), trace, replicas=3, slots=2, cache_tokens=10**9)
    assert result.hit_rate == pytest.approx(physical_limit(trace))
    assert result.bound == pytest.approx(physical_limit(trace))


def test_the_capacity_bound_is_the_optimum_of_its_problem() -> None:
    """Against brute force on small instances: at most ``capacity`` tokens held over any moment."""
    rng = random.Random(1)
    for _ in range(300):
        gaps = []
        for _ in range(rng.randint(1, 4)):
            a = rng.randint(0, 4)
            gaps.append((float(a), float(rng.randint(a + 1, 5)), rng.randint(0, 3)))
        capacity = rng.randint(1, 4)
        best = 0
        for held in itertools.product(*(range(size + 1) for _, _, size in gaps)):
            if all(sum(x for (a, b, _), x in zip(gaps, held) if a <= t < b) <= capacity for t in range(6)):
                best = max(best, sum(held))
        assert capacity_bound(gaps, capacity) == best, (gaps, capacity)


def test_keeping_a_long_gap_would_cost_two_short_ones() -> None:
    # An LRU keeps the long gap's prefix and loses a short one; the optimum keeps both short ones.
    assert capacity_bound([(0.0, 10.0, 10), (1.0, 2.0, 10), (3.0, 4.0, 10)], capacity=10) == 20
    assert capacity_bound([(0.0, 2.0, 6), (1.0, 3.0, 6)], capacity=10) == 10  # part of a prefix counts


def test_the_bursty_trace_has_its_published_shape() -> None:
    trace = TRACES["bursty"](20_000, 5)
    turns = [len(c.turns) for c in trace]
    assert statistics.mean(turns) == pytest.approx(2.0, abs=0.15)  # LMSYS-Chat-1M's mean
    assert sum(n == 1 for n in turns) / len(turns) > 0.6 and max(turns) >= 50  # most one turn, a few very long
    gaps = [b.start - a.start for a, b in itertools.pairwise(trace)]
    cv = statistics.stdev(gaps) / statistics.mean(gaps)
    assert cv == pytest.approx(BURST_SHAPE**-0.5, rel=0.1)  # Gamma(k): CV 1/sqrt(k); Poisson would be 1
    assert statistics.mean(gaps) == pytest.approx(1 / 7.4, rel=0.05)
