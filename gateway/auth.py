"""API-key authentication: ``Authorization: Bearer <key>`` → the key's user and tier."""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.requests import Request

from gateway.errors import Unauthorized
from gateway.store import Store
from parley.errors import Unavailable
from parley.users import hash_key


@dataclass(frozen=True)
class Principal:
    user_id: str
    tier: str


class Authenticator:
    """Keys are looked up in Cassandra and cached for ``cache_s``. While Cassandra is down, a key
    verified within ``stale_s`` keeps working, so users mid-conversation can go on posting; other
    keys get the store's 503."""

    def __init__(self, store: Store, cache_s: float, stale_s: float = 0.0) -> None:
        self._store = store
        self._cache_s = cache_s
        self._stale_s = stale_s
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    async def __call__(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("send your API key as `Authorization: Bearer <key>`", code="missing_api_key")
        digest = hash_key(key.strip())
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is None or now - hit[0] > self._cache_s:
            try:
                found = await self._store.user_for_key(digest)
            except Unavailable:
                if hit is None or hit[1] is None or now - hit[0] > self._stale_s:
                    raise
                return hit[1]  # kept with its old time: the next request asks Cassandra again
            hit = (now, Principal(*found) if found else None)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = hit
        if hit[1] is None:
            raise Unauthorized("this API key is not valid", code="invalid_api_key")
        return hit[1]
