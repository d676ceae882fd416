"""Web sessions and password checks in Cassandra (schemas/cql/0012_accounts.cql), as awaitables.

Every gateway reads and writes the same rows, so a session opened on one works on all of them. Driver
errors are ``StoreUnavailable`` (``parley.cassandra.AsyncCql``). The sign-in limits' rows are
gateway/sign_in_limits.py's.
"""

from __future__ import annotations

import asyncio
import functools
import math
from concurrent.futures import ThreadPoolExecutor
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


#: Password checks at once per gateway. Each argon2id hash takes 64 MiB and about 0.15 s of a core; they run
#: on threads of their own, so a burst of sign-ins neither blocks the event loop nor queues ahead of the
#: default pool's work (Kafka probes, upload writes), and their memory stays bounded.
HASH_THREADS = 4


class SessionStore:
    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql
        self._hashing = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="argon2")

    @property
    def cql(self) -> AsyncCql:
        return self._cql

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
        """``parley.accounts.verify`` on the hashing threads (it hashes for ~0.15 s)."""
        session = await self._cql.session()
        check = functools.partial(accounts.verify, session, email, password, keyspace=self._cql.settings.keyspace)
        return await asyncio.get_running_loop().run_in_executor(self._hashing, check)

    async def erase(self, user_id: str) -> None:
        """``parley.accounts.erase_accounts`` off the event loop: the account, its OpenID links, every session."""
        session = await self._cql.session()
        await asyncio.to_thread(accounts.erase_accounts, session, user_id, keyspace=self._cql.settings.keyspace)
