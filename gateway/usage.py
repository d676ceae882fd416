"""``GET /v1/usage?days=N``: the caller's usage per UTC day and model, their tier's quotas and what is left.

Usage comes from ``usage_by_request`` (one row per generation attempt, folded
from ``chat.usage`` by ``streams/usage.py``), summed per day and model by
Cassandra in one query over the range's day partitions; the quotas from
``gateway/quotas.py``. Today's tokens are read from the same rows, so the
answer and the 429s agree. The figures lag a finished generation by the usage
processor's delay (about a second).
"""

from __future__ import annotations

import asyncio
from datetime import date, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import quotas
from gateway.errors import Unprocessable
from gateway.services import services
from streams.usage_fold import Totals

DEFAULT_DAYS = 7
#: chat.usage keeps 90 days, the most a replay could rebuild.
MAX_DAYS = 90


def parse_days(raw: str | None) -> int:
    """``?days=``: 1..MAX_DAYS, DEFAULT_DAYS when absent; 422 otherwise."""
    if raw is None or raw == "":
        return DEFAULT_DAYS
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_DAYS:  # "²".isdigit(), but int() refuses it
        raise Unprocessable(f"`days` must be a whole number from 1 to {MAX_DAYS}", code="invalid_days")
    return int(raw)


def day_range(today: date, days: int) -> list[date]:
    """The ``days`` UTC days ending today, newest first."""
    return [today - timedelta(days=i) for i in range(days)]


def totals_json(t: Totals) -> dict[str, int]:
    return {
        "requests": t.requests,
        "prompt_tokens": t.prompt_tokens,
        "cached_tokens": t.cached_tokens,
        "completion_tokens": t.completion_tokens,
        "total_tokens": t.total_tokens,
    }


def usage_json(per_day_model: dict[tuple[date, str], Totals]) -> tuple[list[dict[str, Any]], Totals]:
    """Rows newest day first, models by name, and the sum of them all."""
    rows, overall = [], Totals()
    for (day, model), t in sorted(per_day_model.items(), key=lambda kv: (-kv[0][0].toordinal(), kv[0][1])):
        rows.append({"day": day.isoformat(), "model": model, **totals_json(t)})
        overall = overall + t
    return rows, overall


async def get_usage(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    days = parse_days(request.query_params.get("days"))
    q: quotas.Quotas = svc.quotas
    now = q.clock()
    today = quotas.day_of(now)
    span = day_range(today, days)
    per_day_model, requests_now = await asyncio.gather(
        q.store.usage(user.user_id, span), q.requests_this_minute(user.user_id, now)
    )
    rows, overall = usage_json(per_day_model)
    tokens_today = sum(t.total_tokens for (day, _), t in per_day_model.items() if day == today)
    return JSONResponse(
        {
            "user_id": user.user_id,
            "tier": user.tier,
            "from": span[-1].isoformat(),
            "to": span[0].isoformat(),
            "usage": rows,
            "totals": totals_json(overall),
            "quotas": quotas.status(q.limits(user.tier), tokens_today, requests_now, now),
        }
    )
