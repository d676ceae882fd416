"""The synthetic backend's simulated radix cache."""

from __future__ import annotations

from workers.engine.prefix_cache import PrefixCache


def test_longest_prefix_and_hit_rate() -> None:
    cache = PrefixCache(100)
    assert cache.match(["a", "b", "c"]) == 0
    cache.insert(["a", "b", "c", "d"])
    assert cache.match(["a", "b", "x"]) == 2
    assert cache.match(["a", "b", "c", "d", "e"]) == 4
    assert cache.hit_tokens == 6 and cache.lookup_tokens == 11
    assert cache.size == 4


def test_least_recently_used_branch_is_evicted_first() -> None:
    cache = PrefixCache(7)
    cache.insert(["s", "old", "1"])
    cache.insert(["s", "new", "1"])
    cache.match(["s", "new", "1"])  # touch the new branch
    cache.insert(["t", "x", "y"])  # 8 tokens > 7: evict the 2 oldest, down to 90%
    assert cache.size == 6
    assert cache.match(["s", "new", "1"]) == 3
    assert cache.match(["s", "old", "1"]) == 1
