"""The gateway's cache of principals (gateway/auth.py ``_Cache``): bounded, and junk cannot evict users."""

from __future__ import annotations

import asyncio

import pytest

from gateway.auth import Principal, _Cache
from parley.errors import StoreUnavailable


def _principal(user_id: str) -> Principal:
    return Principal(user_id=user_id, tier="plus", org_id=f"org-{user_id}")


def test_a_flood_of_unknown_keys_never_evicts_a_known_one() -> None:
    cache = _Cache(cache_s=60, stale_s=0, capacity=10)
    lookups: list[str] = []

    async def run() -> None:
        async def lookup_of(name: str) -> Principal | None:
            lookups.append(name)
            return _principal(name) if name == "real" else None

        assert await cache.get("real", lambda: lookup_of("real")) == _principal("real")
        for n in range(1_000):
            assert await cache.get(f"junk-{n}", lambda n=n: lookup_of(f"junk-{n}")) is None
        assert await cache.get("real", lambda: lookup_of("real")) == _principal("real")
        assert await cache.get("junk-999", lambda: lookup_of("junk-999")) is None  # the newest miss is remembered

    asyncio.run(run())
    assert lookups.count("real") == 1 and lookups.count("junk-999") == 1


def test_while_the_store_is_down_a_known_principal_is_served_stale_and_an_unknown_is_an_error() -> None:
    cache = _Cache(cache_s=0, stale_s=60, capacity=10)

    async def down() -> Principal | None:
        raise StoreUnavailable("down")

    async def run() -> None:
        async def found() -> Principal | None:
            return _principal("u")

        await cache.get("u", found)
        assert await cache.get("u", down) == _principal("u")
        with pytest.raises(StoreUnavailable):
            await cache.get("someone-else", down)

    asyncio.run(run())
