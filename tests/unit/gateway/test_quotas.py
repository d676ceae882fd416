"""Quota windows, reset times, Retry-After and the verdict; the 429 body; GET /v1/usage's pure parts."""

from __future__ import annotations

import asyncio
import json
from datetime import date, datetime, timedelta, timezone

import pytest

from gateway.auth import Principal
from gateway.errors import Unprocessable
from gateway.quotas import (
    REQUESTS_PER_MINUTE,
    TOKENS_PER_DAY,
    Limits,
    QuotaExceeded,
    Quotas,
    day_reset,
    judge,
    judge_upload,
    limits_for,
    minute_of,
    minute_reset,
    retry_after_s,
    status,
)
from gateway.settings import QuotaSettings
from gateway.usage import DEFAULT_DAYS, MAX_DAYS, day_range, parse_days, usage_json
from parley.errors import ConfigError, StoreUnavailable
from parley.settings import from_env
from streams.usage_fold import Totals


def at(h: int, m: int, s: float = 0.0) -> datetime:
    return datetime(2025, 3, 1, h, m, tzinfo=timezone.utc).replace(second=int(s), microsecond=int((s % 1) * 1e6))


def test_the_minute_window_resets_at_the_next_boundary() -> None:
    now = at(12, 30, 15.25)
    assert minute_of(now) == minute_of(at(12, 30)) == minute_of(at(12, 30, 59.999)) == minute_of(at(12, 31)) - 1
    assert minute_reset(now) == at(12, 31)
    assert retry_after_s(now, minute_reset(now)) == 45  # 44.75 s, rounded up
    assert retry_after_s(at(12, 30, 59.9), at(12, 31)) == 1
    assert retry_after_s(at(12, 31), at(12, 31)) == 1  # never 0: "retry now" would be refused again


def test_the_day_window_resets_at_the_next_utc_midnight_whatever_the_offset() -> None:
    assert day_reset(at(23, 59, 30)) == datetime(2025, 3, 2, tzinfo=timezone.utc)
    assert retry_after_s(at(23, 59, 30), day_reset(at(23, 59, 30))) == 30
    lisbon_summer = at(0, 30).astimezone(timezone(timedelta(hours=1)))  # 01:30 local, 00:30 UTC
    assert day_reset(lisbon_summer) == datetime(2025, 3, 2, tzinfo=timezone.utc)
    assert retry_after_s(at(0, 0), day_reset(at(0, 0))) == 86_400


def test_requests_per_minute_counts_this_request_tokens_per_day_what_was_used() -> None:
    limits = Limits(tokens_per_day=1000, requests_per_minute=3)
    now = at(12, 30, 10)
    assert judge(limits, 999, 3, now) is None  # the third request of the minute and 1 token left: admitted
    over = judge(limits, 0, 4, now)
    assert over is not None and (over.quota, over.limit, over.reset_at, over.retry_after) == (
        REQUESTS_PER_MINUTE, 3, at(12, 31), 50
    )
    over = judge(limits, 1000, 1, now)
    assert over is not None and (over.quota, over.limit, over.reset_at) == (TOKENS_PER_DAY, 1000, datetime(2025, 3, 2, tzinfo=timezone.utc))
    assert over.retry_after == 11 * 3600 + 29 * 60 + 50


def test_with_both_exhausted_the_later_reset_is_named() -> None:
    over = judge(Limits(10, 1), 10, 2, at(12, 0))
    assert over is not None and over.quota == TOKENS_PER_DAY


def test_zero_is_unlimited() -> None:
    assert judge(Limits(0, 0), 10**12, 10**6, at(12, 0)) is None
    assert Limits(0, 0).unlimited and not Limits(0, 5).unlimited


def test_an_upload_is_refused_past_the_days_documents_or_bytes_of_its_tier() -> None:
    settings = from_env(QuotaSettings, {"PARLEY_QUOTA_FREE_UPLOADS_PER_DAY": "3", "PARLEY_QUOTA_FREE_UPLOAD_BYTES_PER_DAY": "100"})
    now = at(23, 59, 30)
    assert judge_upload(settings, "free", (2, 40), 60, now) is None  # the third, and exactly the 100th byte
    count = judge_upload(settings, "free", (3, 40), 1, now)
    assert count is not None and (count.quota, count.limit, count.used, count.retry_after) == ("uploads_per_day", 3, 3, 30)
    size = judge_upload(settings, "free", (1, 40), 61, now)
    assert size is not None and (size.quota, size.limit, size.used) == ("upload_bytes_per_day", 100, 40)
    assert judge_upload(settings, "enterprise", (10**6, 10**15), 10**9, now) is None  # 0: unlimited
    assert "3 uploads per day" in QuotaExceeded(count).message


def test_limits_per_tier_from_the_environment() -> None:
    settings = from_env(
        QuotaSettings, {"PARLEY_QUOTA_FREE_REQUESTS_PER_MINUTE": "2", "PARLEY_QUOTA_PLUS_TOKENS_PER_DAY": "50"}
    )
    assert limits_for(settings, "free") == Limits(100_000, 2)
    assert limits_for(settings, "plus") == Limits(50, 300)
    assert limits_for(settings, "enterprise").unlimited
    assert limits_for(settings, "platinum") == limits_for(settings, "free")  # unknown tiers get the least
    with pytest.raises(ConfigError, match="PARLEY_QUOTA_FREE_TOKENS_PER_DAY"):
        from_env(QuotaSettings, {"PARLEY_QUOTA_FREE_TOKENS_PER_DAY": "-1"})
    with pytest.raises(ConfigError, match="PARLEY_QUOTA_TIMEOUT_S"):
        from_env(QuotaSettings, {"PARLEY_QUOTA_TIMEOUT_S": "0"})


def test_the_429_says_which_quota_its_limit_and_when_it_resets() -> None:
    over = judge(Limits(0, 3), 0, 4, at(12, 30, 10))
    assert over is not None
    response = QuotaExceeded(over).response()
    assert response.status_code == 429
    assert response.headers["retry-after"] == "50"
    body = json.loads(bytes(response.body))
    assert body == {
        "error": {
            "code": "quota_exceeded",
            "message": body["error"]["message"],
            "quota": "requests_per_minute",
            "limit": 3,
            "reset_at": "2025-03-01T12:31:00Z",
            "retry_after": 50,
        }
    }
    assert "3 requests per minute" in body["error"]["message"]


def test_status_shows_what_is_left_and_null_for_unlimited() -> None:
    out = status(Limits(1000, 0), 1200, 4, at(12, 30, 10))
    assert out[TOKENS_PER_DAY] == {"limit": 1000, "used": 1200, "remaining": 0, "reset_at": "2025-03-02T00:00:00Z"}
    assert out[REQUESTS_PER_MINUTE] == {"limit": None, "used": 4, "remaining": None, "reset_at": "2025-03-01T12:31:00Z"}


def test_days_parameter_is_bounded() -> None:
    assert parse_days(None) == parse_days("") == DEFAULT_DAYS == 7
    assert parse_days("1") == 1 and parse_days(str(MAX_DAYS)) == MAX_DAYS
    for bad in ("0", "-1", "abc", "1.5", str(MAX_DAYS + 1)):
        with pytest.raises(Unprocessable):
            parse_days(bad)
    assert day_range(date(2025, 3, 1), 3) == [date(2025, 3, 1), date(2025, 2, 28), date(2025, 2, 27)]


def test_usage_rows_newest_day_first_and_their_sum() -> None:
    rows, overall = usage_json(
        {
            (date(2025, 2, 28), "b"): Totals(1, 10, 0, 5),
            (date(2025, 3, 1), "b"): Totals(2, 20, 4, 6),
            (date(2025, 3, 1), "a"): Totals(1, 1, 0, 1),
        }
    )
    assert [(r["day"], r["model"]) for r in rows] == [("2025-03-01", "a"), ("2025-03-01", "b"), ("2025-02-28", "b")]
    assert rows[1]["total_tokens"] == 26
    assert overall == Totals(4, 31, 4, 12)


# ------------------------------------------------------------------ the check, over an in-memory store


class MemoryStore:
    """What Quotas needs of QuotaStore, in memory (the real one: tests/e2e/test_quotas.py)."""

    def __init__(self, tokens: int = 0, fail: Exception | None = None, delay_s: float = 0.0) -> None:
        self.tokens, self.fail, self.delay_s = tokens, fail, delay_s
        self.minutes: dict[tuple[str, int], set[str]] = {}

    async def _maybe_fail(self) -> None:
        await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail

    async def tokens_on(self, user_id: str, day: date) -> int:
        await self._maybe_fail()
        return self.tokens

    async def note_request(self, user_id: str, minute: int, request_id: str) -> None:
        await self._maybe_fail()
        self.minutes.setdefault((user_id, minute), set()).add(request_id)

    async def forget_request(self, user_id: str, minute: int, request_id: str) -> None:
        self.minutes.get((user_id, minute), set()).discard(request_id)

    async def requests_in(self, user_id: str, minute: int) -> int:
        return len(self.minutes.get((user_id, minute), ()))


def _quotas(store: MemoryStore, now: datetime, **env: str) -> Quotas:
    settings = from_env(QuotaSettings, {"PARLEY_QUOTA_FREE_REQUESTS_PER_MINUTE": "2", "PARLEY_QUOTA_FREE_TOKENS_PER_DAY": "100", **env})
    return Quotas(settings, store, clock=lambda: now)  # type: ignore[arg-type]


FREE = Principal("u1", "free")


def test_the_check_admits_up_to_the_limit_and_a_refused_request_costs_nothing() -> None:
    store = MemoryStore()
    q = _quotas(store, at(12, 0, 5))

    async def run() -> None:
        await q.check(FREE, "r1")
        await q.check(FREE, "r1")  # the same request again (a retried POST): still one
        await q.check(FREE, "r2")
        with pytest.raises(QuotaExceeded) as refused:
            await q.check(FREE, "r3")
        assert refused.value.exceeded.quota == REQUESTS_PER_MINUTE and refused.value.exceeded.retry_after == 55
        assert await store.requests_in("u1", minute_of(at(12, 0))) == 2  # r3 was forgotten
        await q.check(Principal("u2", "free"), "r4")  # another user's minute is their own

    asyncio.run(run())


def test_tokens_used_up_refuse_until_utc_midnight() -> None:
    q = _quotas(MemoryStore(tokens=100), at(23, 0))
    with pytest.raises(QuotaExceeded) as refused:
        asyncio.run(q.check(FREE, "r1"))
    assert (refused.value.exceeded.quota, refused.value.exceeded.retry_after) == (TOKENS_PER_DAY, 3600)


def test_cassandra_down_or_slow_lets_the_request_through() -> None:
    asyncio.run(_quotas(MemoryStore(tokens=10**9, fail=StoreUnavailable("down")), at(12, 0)).check(FREE, "r1"))
    slow = MemoryStore(tokens=10**9, delay_s=0.5)
    asyncio.run(_quotas(slow, at(12, 0), PARLEY_QUOTA_TIMEOUT_S="0.05").check(FREE, "r1"))


def test_unlimited_tiers_never_touch_cassandra() -> None:
    store = MemoryStore(fail=AssertionError("queried"))
    asyncio.run(_quotas(store, at(12, 0)).check(Principal("u1", "enterprise"), "r1"))
