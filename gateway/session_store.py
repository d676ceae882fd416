"""Web sessions, password checks and failed sign-ins in Cassandra (schemas/cql/0012_accounts.cql), as awaitables.

Every gateway reads and writes the same rows, so a session opened on one works on all of them and the
sign-in limits count across them. Driver errors are ``StoreUnavailable`` (``parley.cassandra.AsyncCql``).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime, timezone

from parley import accounts
from parley.cassandra import AsyncCql


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser, as stored. Times are Unix seconds."""

    session_hash: str  # SHA-256 of the id in the cookie; the id itself is never stored
    user_id: str
    csrf_token: str  # the synchronizer token unsafe requests must carry
    created_at: float  # the absolute expiry counts from here
    seen_at: float  # the idle expiry counts from here

    def expires_at(self, idle_s: float, max_s: float) -> float:
        return min(self.created_at + max_s, self.seen_at + idle_s)

    def ttl_s(self, now: float, max_s: float) -> int:
        """Whole seconds its rows may live: to the absolute expiry, at least one."""
        return max(1, math.ceil(self.created_at + max_s - now))


def _time(value: float) -> datetime:
    return datetime.fromtimestamp(value, timezone.utc)


def _seconds(value: datetime) -> float:
    return value.replace(tzinfo=timezone.utc).timestamp()  # the driver reads timestamps as naive UTC


class SessionStore:
    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    async def insert(self, session: WebSession, ttl_s: int) -> None:
        await self._cql.run_batch(
            [
                (
                    "INSERT INTO {ks}.web_sessions (session_hash, user_id, csrf_token, created_at, seen_at) "
                    "VALUES (?, ?, ?, ?, ?) USING TTL ?",
                    (session.session_hash, session.user_id, session.csrf_token, _time(session.created_at),
                     _time(session.seen_at), ttl_s),
                ),
                (
                    "INSERT INTO {ks}.web_sessions_by_user (user_id, session_hash) VALUES (?, ?) USING TTL ?",
                    (session.user_id, session.session_hash, ttl_s),
                ),
            ]
        )  # fmt: skip

    async def get(self, session_hash: str) -> WebSession | None:
        rows = await self._cql.run(
            "SELECT user_id, csrf_token, created_at, seen_at FROM {ks}.web_sessions WHERE session_hash = ?",
            (session_hash,),
        )
        if not rows or rows[0].user_id is None or rows[0].created_at is None:
            return None
        r = rows[0]
        created = _seconds(r.created_at)
        return WebSession(session_hash, r.user_id, r.csrf_token, created, _seconds(r.seen_at) if r.seen_at else created)

    async def touch(self, session: WebSession, ttl_s: int) -> None:
        await self._cql.run(
            "UPDATE {ks}.web_sessions USING TTL ? SET seen_at = ? WHERE session_hash = ?",
            (ttl_s, _time(session.seen_at), session.session_hash),
        )

    async def delete(self, session: WebSession) -> None:
        await self._cql.run_batch(
            [
                ("DELETE FROM {ks}.web_sessions WHERE session_hash = ?", (session.session_hash,)),
                (
                    "DELETE FROM {ks}.web_sessions_by_user WHERE user_id = ? AND session_hash = ?",
                    (session.user_id, session.session_hash),
                ),
            ]
        )

    async def verify(self, email: str, password: str) -> str | None:
        """``parley.accounts.verify`` off the event loop (it hashes for ~0.15 s)."""
        session = await self._cql.session()
        return await asyncio.to_thread(accounts.verify, session, email, password, keyspace=self._cql.settings.keyspace)

    async def erase(self, user_id: str) -> None:
        """``parley.accounts.erase_accounts`` off the event loop: the account, its OpenID links, every session."""
        session = await self._cql.session()
        await asyncio.to_thread(accounts.erase_accounts, session, user_id, keyspace=self._cql.settings.keyspace)

    async def failures(self, scope: str, since: float) -> list[float]:
        """When the failed sign-ins of ``scope`` after ``since`` happened, oldest first."""
        rows = await self._cql.run(
            "SELECT at FROM {ks}.sign_in_failures WHERE scope = ? AND at > ?", (scope, _time(since))
        )
        return [_seconds(r.at) for r in rows]

    async def record_failure(self, scope: str, at: float, ttl_s: int) -> None:
        await self._cql.run(
            "INSERT INTO {ks}.sign_in_failures (scope, at, attempt) VALUES (?, ?, now()) USING TTL ?",
            (scope, _time(at), ttl_s),
        )
