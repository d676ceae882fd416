"""Authentication: ``Authorization: Bearer <key>`` → the key's user, its organisation and role;
without the header, the web page's session cookie (gateway/sessions.py, CSRF-checked on writes).

Each credential carries scopes (parley/users.py SCOPES): a key ``chat`` only, the web session all of them.
A handler names the scope it needs (``auth(request, ACCOUNT)``, default ``chat``); a credential without it
is a 403 ``insufficient_scope``, before anything else is looked at.

A key, a user or an organisation that is revoked, disabled or erased stops
working within ``cache_s`` (the cache's bound) on every gateway.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from starlette.requests import Request

from gateway.directory import Directory
from gateway.errors import Forbidden, Misdirected, Unauthorized
from gateway.sessions import COOKIE, WebSessions
from parley.errors import Unavailable
from parley.lru import LRU
from parley.users import CHAT, SESSION_SCOPES, hash_key
from schemas import sealing

#: Principals (and, apart, unknown names) one gateway keeps: far more than its live users.
CACHE_CAPACITY = 10_000


@dataclass(frozen=True)
class Principal:
    user_id: str
    tier: str
    org_id: str = ""
    role: str = "member"  # member | admin (of org_id)
    key_id: str = ""  # the API key it signed in with ("" for a session)
    residency: str | None = None  # the organisation's home region label, if it set one
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({CHAT}))  # what its credential may do

    @property
    def admin(self) -> bool:
        return self.role == "admin"


def require(principal: Principal, scope: str) -> Principal:
    """``principal`` when its credential holds ``scope``, else 403 ``insufficient_scope``."""
    if scope not in principal.scopes:
        raise Forbidden(
            f"this needs the `{scope}` scope, which an API key does not hold (keys hold `chat`): use the web page's session",
            code="insufficient_scope",
        )
    return principal


class _Cache:
    """Lookups kept for ``cache_s``; while Cassandra is down one verified within ``stale_s`` keeps
    working, so users mid-conversation can go on posting; others get the store's 503.

    Two bounded LRUs: what was found, and what was not. A flood of junk keys churns only the second,
    so it never evicts a real user's entry (a single map cleared when full did)."""

    def __init__(self, cache_s: float, stale_s: float, capacity: int = CACHE_CAPACITY) -> None:
        self._cache_s, self._stale_s = cache_s, stale_s
        self._found: LRU[str, tuple[float, Principal]] = LRU(capacity)
        self._missing: LRU[str, float] = LRU(capacity)

    def drop(self, name: str) -> None:
        self._found.pop(name)
        self._missing.pop(name)

    async def get(self, name: str, lookup: Callable[[], Awaitable[Principal | None]]) -> Principal | None:
        now = time.monotonic()
        hit = self._found.get(name)
        if hit is not None and now - hit[0] <= self._cache_s:
            return hit[1]
        missed = self._missing.get(name)
        if missed is not None and now - missed <= self._cache_s:
            return None
        try:
            found = await lookup()
        except Unavailable:
            if hit is None or now - hit[0] > self._stale_s:
                raise
            return hit[1]  # kept with its old time: the next request asks Cassandra again
        if found is None:
            self._found.pop(name)
            self._missing.put(name, now)
        else:
            self._missing.pop(name)
            self._found.put(name, (now, found))
        return found


async def _keys_held(principal: Principal) -> Principal:
    """The caller's data key read (or made) off the loop, so what the request seals and opens (its rows,
    its reply's chunks) does not wait on Cassandra there. If it cannot be read now, a route that needs
    it answers 503 when it does; the others still serve."""
    try:
        await sealing.prefetch([principal.user_id], create=True)
    except Unavailable:
        pass
    return principal


class Authenticator:
    def __init__(self, directory: Directory, cache_s: float, stale_s: float = 0.0, *, region: str = "") -> None:
        self._directory = directory
        self._region = region
        self._keys = _Cache(cache_s, stale_s)
        self._users = _Cache(cache_s, stale_s)
        self.sessions: WebSessions | None = None  # the web page's sessions, set by the app

    async def __call__(self, request: Request, scope: str = CHAT) -> Principal:
        """The caller, whose credential holds ``scope`` (else 403)."""
        if self.sessions is not None and "authorization" not in request.headers and request.cookies.get(COOKIE):
            session = await self.sessions.authenticate(request)  # 401 ended, 403 a write failing the CSRF check
            found = await self.of_user(session.user_id)
            if found is None:
                raise Unauthorized("this account can no longer sign in", code="session_expired")
            return await _keys_held(require(self._in_region(replace(found, scopes=SESSION_SCOPES)), scope))
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("send your API key as `Authorization: Bearer <key>`", code="missing_api_key")
        digest = hash_key(key.strip())
        found = await self._keys.get(digest, lambda: self._key_principal(digest))
        if found is None:
            raise Unauthorized("this API key is not valid", code="invalid_api_key")
        return await _keys_held(require(self._in_region(found), scope))

    def _in_region(self, found: Principal) -> Principal:
        """An organisation homed elsewhere is served only there: its rows and log live in that region."""
        if self._region and found.residency and found.residency != self._region:
            raise Misdirected(
                f"this organisation's data lives in region {found.residency!r}; send requests to that region",
                headers={"Parley-Home-Region": found.residency},
            )
        return found

    def forget(self, user_id: str | None, key_hashes: list[str]) -> None:
        """Drop a user and their keys from this gateway's cache now (a revocation, a change of role or
        standing, an erasure); other gateways drop them within ``cache_s``."""
        if user_id is not None:
            self._users.drop(user_id)
        for digest in key_hashes:
            self._keys.drop(digest)

    async def of_user(self, user_id: str) -> Principal | None:
        """The user's principal (no key), or None for a missing, disabled or erased user."""
        return await self._users.get(user_id, lambda: self._principal(user_id, ""))

    async def _key_principal(self, digest: str) -> Principal | None:
        key = await self._directory.key(digest)
        if key is None:
            return None
        user_id, key_id, scopes = key
        found = await self._principal(user_id, key_id)
        return None if found is None else replace(found, scopes=scopes)

    async def _principal(self, user_id: str, key_id: str) -> Principal | None:
        user = await self._directory.user(user_id)
        if user is None or user.disabled or user.erased:
            return None
        org = await self._directory.org(user.org_id)
        if org is not None and org.disabled:
            return None
        return Principal(user.user_id, user.tier, user.org_id, user.role, key_id, org.residency if org else None)
