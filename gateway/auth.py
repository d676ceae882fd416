"""API-key authentication: ``Authorization: Bearer <key>`` → the key's user and tier."""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.requests import Request

from gateway.errors import Unauthorized
from gateway.store import Store
from parley.users import hash_key


@dataclass(frozen=True)
class Principal:
    user_id: str
    tier: str


class Authenticator:
    def __init__(self, store: Store, cache_s: float) -> None:
        self._store = store
        self._cache_s = cache_s
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
            found = await self._store.user_for_key(digest)
            hit = (now, Principal(*found) if found else None)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = hit
        if hit[1] is None:
            raise Unauthorized("this API key is not valid", code="invalid_api_key")
        return hit[1]
