"""Quotas per tier, enforced before a generation is appended: tokens per UTC day, requests per minute.

Both are shared by every gateway instance, because their state lives in
Cassandra, not in a process:

- **requests/minute**: the gateway inserts the reply id into
  ``requests_by_minute`` (partition = user and UTC minute, rows expire after
  3 minutes), then counts the partition, and refuses when the count exceeds the
  limit (its own row is then deleted, so a refused request costs nothing).
  Never more than ``limit`` are admitted per minute however many gateways race:
  of the admitted requests, the one whose insert landed last counted every
  other admitted row. Racing requests may both see the other and both be
  refused; that errs on the strict side, for the last request or two of a
  window. A retried POST carries the same reply id, so its row is the same row.
- **tokens/day**: the sum of prompt + completion tokens in the user's
  ``usage_by_request`` partition for today, folded by the usage processor
  (``streams/usage.py``) from ``chat.usage``. It lags the end of a generation
  by the processor's delay (about a second), and a request is admitted while
  the sum is under the limit, so the turn that crosses it finishes and a few
  concurrent ones may too: the limit is a gate, not a hard cap on tokens.

Windows are fixed and in UTC: a minute resets at the next minute boundary, a
day at the next UTC midnight; ``Retry-After`` is the whole seconds until then.
When both quotas are exhausted the answer names the one that resets later
(retrying sooner would only be refused again).

Cassandra down or slow (past PARLEY_QUOTA_TIMEOUT_S): the check lets the
request through and logs it. Quotas protect capacity; refusing every turn
because the quota store is down would be an outage of its own. Both checks
are one round trip each, run concurrently; the request count adds a second.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from starlette.responses import JSONResponse

from gateway.auth import Principal
from gateway.errors import ApiError
from gateway.settings import QuotaSettings
from gateway.store import Store
from parley.errors import StoreUnavailable
from streams.usage_fold import Totals

log = logging.getLogger(__name__)

TIERS = ("free", "plus", "enterprise")
TOKENS_PER_DAY = "tokens_per_day"
REQUESTS_PER_MINUTE = "requests_per_minute"
UPLOADS_PER_DAY = "uploads_per_day"
UPLOAD_BYTES_PER_DAY = "upload_bytes_per_day"


# ------------------------------------------------------------------ pure


@dataclass(frozen=True)
class Limits:
    tokens_per_day: int  # 0 = unlimited
    requests_per_minute: int  # 0 = unlimited

    @property
    def unlimited(self) -> bool:
        return not self.tokens_per_day and not self.requests_per_minute


def limits_for(settings: QuotaSettings, tier: str) -> Limits:
    """The tier's limits; a tier Parley does not know gets free's."""
    tier = tier if tier in TIERS else "free"
    return Limits(getattr(settings, f"{tier}_tokens_per_day"), getattr(settings, f"{tier}_requests_per_minute"))


def minute_of(now: datetime) -> int:
    """The window of ``now``: whole minutes since the Unix epoch (UTC)."""
    return math.floor(now.timestamp()) // 60


def minute_reset(now: datetime) -> datetime:
    return datetime.fromtimestamp((minute_of(now) + 1) * 60, tz=timezone.utc)


def day_of(now: datetime) -> date:
    return now.astimezone(timezone.utc).date()


def day_reset(now: datetime) -> datetime:
    return datetime.combine(day_of(now) + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)


def retry_after_s(now: datetime, reset_at: datetime) -> int:
    """Whole seconds until ``reset_at``, rounded up and at least 1 (what ``Retry-After`` carries)."""
    return max(1, math.ceil((reset_at - now).total_seconds()))


@dataclass(frozen=True)
class Exceeded:
    quota: str  # TOKENS_PER_DAY | REQUESTS_PER_MINUTE | UPLOADS_PER_DAY | UPLOAD_BYTES_PER_DAY
    limit: int
    used: int
    reset_at: datetime
    retry_after: int


def judge(limits: Limits, tokens_today: int, requests_this_minute: int, now: datetime) -> Exceeded | None:
    """The quota this request exceeds, if any.

    ``requests_this_minute`` counts this request too; ``tokens_today`` is what
    earlier generations used (this one has not run yet), so the request is
    refused once the day's tokens reached the limit.
    """
    over = []
    if limits.tokens_per_day and tokens_today >= limits.tokens_per_day:
        reset = day_reset(now)
        over.append(Exceeded(TOKENS_PER_DAY, limits.tokens_per_day, tokens_today, reset, retry_after_s(now, reset)))
    if limits.requests_per_minute and requests_this_minute > limits.requests_per_minute:
        reset = minute_reset(now)
        over.append(
            Exceeded(REQUESTS_PER_MINUTE, limits.requests_per_minute, requests_this_minute, reset, retry_after_s(now, reset))
        )
    return max(over, key=lambda e: e.reset_at) if over else None


def judge_upload(settings: QuotaSettings, tier: str, uploads_today: tuple[int, int], size: int, now: datetime) -> Exceeded | None:
    """The upload quota a new document of ``size`` bytes exceeds, given the day's (count, bytes) so far."""
    tier = tier if tier in TIERS else "free"
    count_limit, bytes_limit = getattr(settings, f"{tier}_uploads_per_day"), getattr(settings, f"{tier}_upload_bytes_per_day")
    count, stored = uploads_today
    reset = day_reset(now)
    if count_limit and count + 1 > count_limit:
        return Exceeded(UPLOADS_PER_DAY, count_limit, count, reset, retry_after_s(now, reset))
    if bytes_limit and stored + size > bytes_limit:
        return Exceeded(UPLOAD_BYTES_PER_DAY, bytes_limit, stored, reset, retry_after_s(now, reset))
    return None


def iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def status(limits: Limits, tokens_today: int, requests_this_minute: int, now: datetime) -> dict[str, Any]:
    """What ``GET /v1/usage`` shows of each quota: limit (null = unlimited), used, remaining, reset_at."""

    def one(limit: int, used: int, reset_at: datetime) -> dict[str, Any]:
        return {
            "limit": limit or None,
            "used": used,
            "remaining": max(0, limit - used) if limit else None,
            "reset_at": iso(reset_at),
        }

    return {
        TOKENS_PER_DAY: one(limits.tokens_per_day, tokens_today, day_reset(now)),
        REQUESTS_PER_MINUTE: one(limits.requests_per_minute, requests_this_minute, minute_reset(now)),
    }


class QuotaExceeded(ApiError):
    """429 with ``Retry-After``; the body says which quota, its limit and when it resets."""

    status, code = 429, "quota_exceeded"

    def __init__(self, exceeded: Exceeded) -> None:
        what = exceeded.quota.replace("_", " ")
        super().__init__(
            f"quota of {exceeded.limit} {what} reached; retry after {iso(exceeded.reset_at)}",
            retry_after=exceeded.retry_after,
        )
        self.exceeded = exceeded

    def response(self) -> JSONResponse:
        e = self.exceeded
        body = {
            "error": {
                "code": self.code,
                "message": self.message,
                "quota": e.quota,
                "limit": e.limit,
                "reset_at": iso(e.reset_at),
                "retry_after": e.retry_after,
            }
        }
        return JSONResponse(body, status_code=self.status, headers={"Retry-After": str(e.retry_after)})


# ------------------------------------------------------------------ Cassandra


class QuotaStore(Store):
    """The gateway's session, with the reads and writes of usage and quotas."""

    async def tokens_on(self, user_id: str, day: date) -> int:
        rows = await self._run(
            "SELECT sum(prompt_tokens) AS p, sum(completion_tokens) AS c FROM {ks}.usage_by_request "
            "WHERE user_id = ? AND day = ?",
            (user_id, day),
        )
        return int(rows[0].p or 0) + int(rows[0].c or 0) if rows else 0

    async def usage(self, user_id: str, days: list[date]) -> dict[tuple[date, str], Totals]:
        """Totals per (day, model) over ``days``, summed by Cassandra."""
        rows = await self._run(
            "SELECT day, model, count(*) AS n, sum(prompt_tokens) AS p, sum(cached_tokens) AS ca, "
            "sum(completion_tokens) AS c FROM {ks}.usage_by_request WHERE user_id = ? AND day IN ? GROUP BY day, model",
            (user_id, days),
        )
        out: dict[tuple[date, str], Totals] = {}
        for r in rows:
            day = r.day.date() if hasattr(r.day, "date") else r.day  # the driver's Date wraps days since the epoch
            out[(day, r.model)] = Totals(int(r.n or 0), int(r.p or 0), int(r.ca or 0), int(r.c or 0))
        return out

    async def note_request(self, user_id: str, minute: int, request_id: str) -> None:
        await self._run(
            "INSERT INTO {ks}.requests_by_minute (user_id, minute, request_id) VALUES (?, ?, ?)",
            (user_id, minute, request_id),
        )

    async def forget_request(self, user_id: str, minute: int, request_id: str) -> None:
        await self._run(
            "DELETE FROM {ks}.requests_by_minute WHERE user_id = ? AND minute = ? AND request_id = ?",
            (user_id, minute, request_id),
        )

    async def uploads_on(self, user_id: str, day: date) -> tuple[int, int]:
        """(documents, bytes) the user uploaded on ``day`` (UTC) that are still kept."""
        rows = await self._run("SELECT created_at, size_bytes FROM {ks}.documents WHERE user_id = ?", (user_id,))
        today = [r for r in rows if r.created_at is not None and day_of(r.created_at.replace(tzinfo=timezone.utc)) == day]
        return len(today), sum(int(r.size_bytes or 0) for r in today)

    async def requests_in(self, user_id: str, minute: int) -> int:
        rows = await self._run(
            "SELECT count(*) AS n FROM {ks}.requests_by_minute WHERE user_id = ? AND minute = ?", (user_id, minute)
        )
        return int(rows[0].n) if rows else 0


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Quotas:
    """The check every generation-starting handler makes, and what ``GET /v1/usage`` reports."""

    def __init__(self, settings: QuotaSettings, store: QuotaStore, clock: Callable[[], datetime] = utc_now) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock

    def limits(self, tier: str) -> Limits:
        return limits_for(self.settings, tier)

    async def check(self, user: Principal, request_id: str) -> None:
        """Raise QuotaExceeded (429) when ``user`` may not start generation ``request_id`` now.

        Counts the request against this minute when admitted. Fails open: when
        Cassandra does not answer in time the request goes through.
        """
        limits = self.limits(user.tier)
        if limits.unlimited:
            return
        now = self.clock()
        try:
            verdict = await asyncio.wait_for(self._judge(user.user_id, limits, request_id, now), self.settings.timeout_s)
        except (StoreUnavailable, asyncio.TimeoutError) as exc:
            log.warning("quota check skipped, request let through", extra={"error": type(exc).__name__})
            return
        if verdict is not None:
            raise QuotaExceeded(verdict)

    async def check_upload(self, user: Principal, size: int) -> None:
        """Raise QuotaExceeded (429) when ``user`` may not upload a document of ``size`` bytes today.
        Fails open as ``check`` does."""
        now = self.clock()
        try:
            today = await asyncio.wait_for(self.store.uploads_on(user.user_id, day_of(now)), self.settings.timeout_s)
        except (StoreUnavailable, asyncio.TimeoutError) as exc:
            log.warning("upload quota check skipped, upload let through", extra={"error": type(exc).__name__})
            return
        verdict = judge_upload(self.settings, user.tier, today, size, now)
        if verdict is not None:
            raise QuotaExceeded(verdict)

    async def _judge(self, user_id: str, limits: Limits, request_id: str, now: datetime) -> Exceeded | None:
        minute = minute_of(now)

        async def tokens() -> int:
            return await self.store.tokens_on(user_id, day_of(now)) if limits.tokens_per_day else 0

        async def requests() -> int:
            if not limits.requests_per_minute:
                return 0
            await self.store.note_request(user_id, minute, request_id)
            return await self.store.requests_in(user_id, minute)

        used_tokens, used_requests = await asyncio.gather(tokens(), requests())
        verdict = judge(limits, used_tokens, used_requests, now)
        if verdict is not None and limits.requests_per_minute:
            await self.store.forget_request(user_id, minute, request_id)  # refused: it used nothing
        return verdict

    async def requests_this_minute(self, user_id: str, now: datetime) -> int:
        return await self.store.requests_in(user_id, minute_of(now))
