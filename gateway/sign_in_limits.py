"""Sign-in limits that count attempts, reserved before the password is checked (docs/web-sign-in.md).

An attempt takes a slot in each limit that applies to it before the password is looked at, and is
refused (429) when a limit has no slot left. Slots are claimed with a lightweight transaction, so however
many gateways race for the last slot, one gets it: N concurrent guesses make at most the limit's number
of password checks. A slot lives for the window (its TTL); a good sign-in gives its slots back, a failed
one leaves them taken until the window lets them go.

The limits (each 0: none), over PARLEY_SESSION_SIGNIN_WINDOW_S:

- per address (PARLEY_SESSION_SIGNIN_PER_ADDRESS): one source's attempts on any emails;
- per email and address (PARLEY_SESSION_SIGNIN_PER_EMAIL_ADDRESS): one source against one account;
- per email (PARLEY_SESSION_SIGNIN_PER_EMAIL): against one account from addresses where it has not signed in
  within PARLEY_SESSION_SIGNIN_FAMILIAR_S. It bounds a guesser that spreads over many addresses, and an
  attacker who fills it cannot lock the owner out where the owner signed in before: attempts from a
  familiar address are neither counted nor refused by it.

The address is the one ``gateway/client_address.py`` decides (never the client's own claim). Limit keys
are SHA-256 "scopes", so the tables hold no address or email.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from gateway.client_address import limit_key
from gateway.errors import ApiError
from gateway.settings import SessionSettings
from parley import accounts
from parley.cassandra import AsyncCql


class TooManySignIns(ApiError):
    status, code = 429, "too_many_sign_ins"


# ------------------------------------------------------------------ pure


@dataclass(frozen=True)
class Scopes:
    """The keys of one attempt's limits."""

    address: str
    email_address: str  # also the key of the pair's familiarity
    email: str


def scopes(address: str, email: str) -> Scopes:
    """The keys of the limits on ``email`` from ``address``; hashed, so the tables hold neither."""
    try:
        email = accounts.normal_email(email)
    except ValueError:
        email = email.strip().casefold()
    address = limit_key(address)

    def key(*parts: str) -> str:
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    return Scopes(key("address", address), key("email-address", email, address), key("email", email))


def retry_after(ttls: list[int], limit: int) -> float | None:
    """Seconds until a slot frees (``ttls``: the seconds each taken slot has left), or None when one is free."""
    if not limit or len(ttls) < limit:
        return None
    return float(sorted(ttls)[len(ttls) - limit])


def free_slots(taken: set[int], limit: int) -> list[int]:
    """The slots an attempt may try, in a random order: concurrent attempts rarely try the same one first."""
    free = [slot for slot in range(limit) if slot not in taken]
    random.shuffle(free)
    return free


# ------------------------------------------------------------------ Cassandra (schemas/cql/0013_sign_in_attempts.cql)


@dataclass(frozen=True)
class Slot:
    scope: str
    slot: int
    claim: uuid.UUID  # the attempt's, so that giving it back cannot free a later attempt's claim


class AttemptStore:
    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    async def taken(self, scope: str) -> dict[int, int]:
        """The scope's taken slots → the seconds each has left."""
        rows = await self._cql.run(
            "SELECT slot, TTL(claim) AS ttl FROM {ks}.sign_in_attempts WHERE scope = ?", (scope,)
        )
        return {r.slot: r.ttl or 0 for r in rows}

    async def claim(self, slot: Slot, ttl_s: int) -> bool:
        rows = await self._cql.run(
            "INSERT INTO {ks}.sign_in_attempts (scope, slot, claim) VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?",
            (slot.scope, slot.slot, slot.claim, ttl_s),
        )
        return bool(rows and rows[0].applied)

    async def release(self, slot: Slot) -> None:
        await self._cql.run(
            "DELETE FROM {ks}.sign_in_attempts WHERE scope = ? AND slot = ? IF claim = ?",
            (slot.scope, slot.slot, slot.claim),
        )

    async def familiar(self, scope: str) -> bool:
        return bool(await self._cql.run("SELECT at FROM {ks}.sign_in_familiar WHERE scope = ?", (scope,)))

    async def remember(self, scope: str, ttl_s: int) -> None:
        await self._cql.run(
            "INSERT INTO {ks}.sign_in_familiar (scope, at) VALUES (?, ?) USING TTL ?",
            (scope, datetime.now(timezone.utc), ttl_s),
        )


# ------------------------------------------------------------------ limits


@dataclass(frozen=True)
class Reservation:
    """An attempt's slots, held while its password is checked."""

    scopes: Scopes
    slots: tuple[Slot, ...]


class SignInLimits:
    def __init__(self, settings: SessionSettings, store: AttemptStore) -> None:
        self.settings = settings
        self.store = store

    async def reserve(self, address: str, email: str) -> Reservation:
        """A slot in every limit on ``email`` from ``address``; 429, with nothing held, when one is full."""
        s = self.settings
        keys = scopes(address, email)
        limits = {
            scope: limit
            for scope, limit in (
                (keys.address, s.signin_per_address),
                (keys.email_address, s.signin_per_email_address),
                (keys.email, s.signin_per_email),
            )
            if limit  # 0: no limit
        }
        reads = asyncio.gather(*(self.store.taken(scope) for scope in limits))
        familiar, taken_each = await asyncio.gather(self.store.familiar(keys.email_address), reads)
        taken = dict(zip(limits, taken_each))
        if familiar:  # the email's own limit does not count its owner's usual addresses
            limits.pop(keys.email, None)
        waits = [retry_after(list(taken[scope].values()), limit) for scope, limit in limits.items()]
        full = [wait for wait in waits if wait is not None]
        if full:  # refused without a write
            raise _refusal(max(full))
        held: list[Slot] = []
        try:
            # The scarcest limit first: attempts that lose its race stop before they hold a slot of another.
            for scope, limit in sorted(limits.items(), key=lambda item: item[1]):
                slot = await self._claim(scope, limit, set(taken[scope]))
                if slot is None:  # other attempts took its last slots since it was read
                    raise _refusal(min(taken[scope].values(), default=round(s.signin_window_s)))
                held.append(slot)
        except BaseException:
            await asyncio.shield(self._release(tuple(held)))  # a refusal, or Cassandra failing: nothing kept
            raise
        return Reservation(keys, tuple(held))

    async def succeeded(self, reservation: Reservation) -> None:
        """A good sign-in: its slots given back, and its address familiar to the email."""
        familiar_s = round(self.settings.signin_familiar_s)  # 0: none becomes familiar (a TTL of 0 never expires)
        await asyncio.gather(
            self._release(reservation.slots),
            *([self.store.remember(reservation.scopes.email_address, familiar_s)] if familiar_s > 0 else []),
        )

    async def _claim(self, scope: str, limit: int, taken: set[int]) -> Slot | None:
        """A free slot of ``scope``, or None when every one was taken before this attempt got one."""
        ttl = max(1, round(self.settings.signin_window_s))
        for number in free_slots(taken, limit):
            slot = Slot(scope, number, uuid.uuid4())
            if await self.store.claim(slot, ttl):
                return slot
        return None

    async def _release(self, slots: tuple[Slot, ...]) -> None:
        await asyncio.gather(*(self.store.release(slot) for slot in slots))


def _refusal(wait_s: float) -> TooManySignIns:
    return TooManySignIns("too many sign-in attempts; wait before trying again", retry_after=max(1.0, wait_s))
