"""Quotas and usage on the real stack: one isolated stack with low quotas and TWO gateways.

- requests/minute (free tier: 3): the limit is shared, so the 4th request of a
  minute is refused with 429 on either gateway, with ``Retry-After`` = the
  seconds to the next minute boundary (where the window resets: unit-tested); a retried POST of an admitted message
  is not counted again.
- tokens/day (plus tier: 1 token): once the usage processor has folded the
  first reply's UsageRecorded, both gateways refuse with ``Retry-After`` = the
  seconds to the next UTC midnight.
- ``GET /v1/usage`` equals the fold of the user's UsageRecorded events read
  from ``chat.usage``.

No timing assertions; waits have generous deadlines.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from parley.consumer import read_until, watermarks
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import UsageRecorded
from streams.usage_fold import fold
from tools import isolated
from tools.client import ApiError, ParleyClient, parse_sse
from tools.topology import CHAT_PATH, GATEWAY, USAGE

RPM = 3
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "400",
    "PARLEY_CONTEXT_MAX_TOKENS": "20",
    "PARLEY_QUOTA_FREE_REQUESTS_PER_MINUTE": str(RPM),
    "PARLEY_QUOTA_FREE_TOKENS_PER_DAY": "0",  # unlimited: the free user tests requests/minute alone
    "PARLEY_QUOTA_PLUS_REQUESTS_PER_MINUTE": "0",
    "PARLEY_QUOTA_PLUS_TOKENS_PER_DAY": "1",  # the first reply uses it up
    "PARLEY_QUOTA_FREE_UPLOADS_PER_DAY": "2",
    "PARLEY_QUOTA_PLUS_UPLOAD_BYTES_PER_DAY": "1000",
    "PARLEY_QUOTA_TIMEOUT_S": "15",  # two shared cores: never let a slow check fail open here
}
DEADLINE_S = 90.0


class Quotas:
    def __init__(self, inner: isolated.IsolatedStack, second_url: str) -> None:
        self.inner = inner
        self.urls = (inner.url, second_url)
        self.kafka = inner.kafka


@pytest.fixture(scope="module")
def quotas(infra, tmp_path_factory) -> Iterator[Quotas]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "e2equota")
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("quota-logs"), ENV, (*CHAT_PATH, USAGE))
    try:
        port = isolated.free_port()
        second = inner.supervisor.start(
            GATEWAY, name="gateway-2", extra_env={"PARLEY_GATEWAY_PORT": str(port)}, ports={"gateway_port": port}
        )
        inner.supervisor.wait_ready(second)
        yield Quotas(inner, f"http://127.0.0.1:{port}")
    finally:
        inner.stop()
        isolated.drop(kafka, cassandra)


async def _post(url: str, key: str, cid: str, client_message_id: str) -> tuple[httpx.Response, list, float, float]:
    """POST a message; the response, its SSE events (if 200), and the clock just before and after."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        before = time.time()
        body = {"content": "Say something short", "client_message_id": client_message_id}
        async with http.stream("POST", f"/v1/conversations/{cid}/messages", json=body) as r:
            after = time.time()
            if r.status_code != 200:
                await r.aread()
                return r, [], before, after
            events = [e async for e in parse_sse(r.aiter_lines())]
        return r, events, before, after


def _assert_retry_after(r: httpx.Response, before: float, after: float, reset_at: datetime) -> None:
    """Retry-After is the whole seconds from the moment of the request to reset_at, rounded up."""
    body = r.json()["error"]
    header = int(r.headers["retry-after"])
    assert header == body["retry_after"]
    assert datetime.fromisoformat(body["reset_at"].replace("Z", "+00:00")) == reset_at
    low = max(1, math.ceil(reset_at.timestamp() - after))
    high = max(1, math.ceil(reset_at.timestamp() - before))
    assert low <= header <= high, (header, low, high)


def _next_minute(t: float) -> datetime:
    return datetime.fromtimestamp((math.floor(t) // 60 + 1) * 60, tz=timezone.utc)


async def test_requests_per_minute_are_shared_by_two_gateways(quotas: Quotas) -> None:
    _, key = quotas.inner.create_user("rpm", "free")
    a, b = quotas.urls
    client = ParleyClient(a, key)
    try:
        cid = await client.create_conversation("rpm")
        # The burst must not straddle a minute boundary: start it early in a fresh minute.
        if time.time() % 60 > 40:
            await asyncio.sleep(60 - time.time() % 60 + 0.5)
        window = _next_minute(time.time())

        admitted = []
        for i, url in enumerate((a, b, a)):
            r, events, _, _ = await _post(url, key, cid, f"m{i}")
            assert r.status_code == 200, r.text
            assert events[-1].event == "done", events[-1]
            admitted.append(events[0].data["reply_id"])

        for url in (b, a):  # the fourth request of the minute, on either gateway
            r, _, before, after = await _post(url, key, cid, f"over-{uuid.uuid4().hex[:6]}")
            assert r.status_code == 429, r.text
            body = r.json()["error"]
            assert (body["code"], body["quota"], body["limit"]) == ("quota_exceeded", "requests_per_minute", RPM)
            assert _next_minute(before) == window, "the burst straddled a minute boundary"
            _assert_retry_after(r, before, after, window)

        # A retried POST of an admitted message is the same reply, not a new request: not refused.
        r, events, _, _ = await _post(b, key, cid, "m1")
        assert r.status_code == 200 and events[0].data["reply_id"] == admitted[1]

        # Regenerating starts a generation too, and a moderation call costs a request: refused the same way.
        async with httpx.AsyncClient(base_url=b, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            r = await http.post(f"/v1/messages/{admitted[0]}/regenerate", json={"client_message_id": "again"})
            assert r.status_code == 429 and r.json()["error"]["quota"] == "requests_per_minute"
            r = await http.post("/v1/moderations", json={"input": "Is this fine?"})
            assert r.status_code == 429 and r.json()["error"]["quota"] == "requests_per_minute", r.text

        # Nothing refused was appended: the conversation holds the three admitted turns only.
        conv = await client.conversation(cid)
        assert sorted(m["id"] for m in conv["messages"] if m["role"] == "assistant") == sorted(admitted)
        # That the next minute admits again is the window's arithmetic (tests/unit/gateway/test_quotas.py, and
        # Retry-After above names its end): waiting for it here cost the suite 30 s on average.
    finally:
        await client.close()


async def test_tokens_per_day_refuse_on_both_gateways_once_usage_is_folded(quotas: Quotas) -> None:
    _, key = quotas.inner.create_user("tokens", "plus")
    a, b = quotas.urls
    client = ParleyClient(a, key)
    try:
        cid = await client.create_conversation("tokens")
        r, events, _, _ = await _post(a, key, cid, "first")
        assert r.status_code == 200 and events[-1].event == "done"
        assert sum(events[-1].data["usage"].get(k, 0) for k in ("prompt_tokens", "completion_tokens")) >= 1

        # Admitted until the usage processor folds the first reply (about a second), refused after.
        deadline = time.monotonic() + DEADLINE_S
        while True:
            r, events, before, after = await _post(b, key, cid, uuid.uuid4().hex)
            if r.status_code == 429:
                break
            assert r.status_code == 200, r.text
            assert time.monotonic() < deadline, "tokens/day never refused: usage not folded?"
            await asyncio.sleep(0.5)
        midnight = datetime.combine(
            datetime.fromtimestamp(before, tz=timezone.utc).date() + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc
        )
        body = r.json()["error"]
        assert (body["code"], body["quota"], body["limit"]) == ("quota_exceeded", "tokens_per_day", 1)
        _assert_retry_after(r, before, after, midnight)

        r, _, before, after = await _post(a, key, cid, uuid.uuid4().hex)
        assert r.status_code == 429 and r.json()["error"]["quota"] == "tokens_per_day"
        _assert_retry_after(r, before, after, midnight)
    finally:
        await client.close()


async def test_uploads_past_the_days_documents_or_bytes_are_refused_and_stored_nothing(quotas: Quotas) -> None:
    _, free = quotas.inner.create_user("uploads", "free")  # 2 documents a day
    _, plus = quotas.inner.create_user("bytes", "plus")  # 1,000 bytes a day
    a, b = quotas.urls
    one, one_elsewhere = ParleyClient(a, free), ParleyClient(b, free)
    other = ParleyClient(b, plus)
    try:
        for n in range(2):
            await one.upload(f"note-{n}.txt", b"A short note.\n", "text/plain")
        with pytest.raises(ApiError) as third:
            await one_elsewhere.upload("note-3.txt", b"One too many.\n", "text/plain")  # counted across gateways
        assert third.value.status == 429 and third.value.body["error"]["quota"] == "uploads_per_day"
        assert len((await one._json("GET", "/v1/documents"))["data"]) == 2
        await other.upload("small.txt", b"x" * 600, "text/plain")
        with pytest.raises(ApiError) as big:
            await other.upload("over.txt", b"y" * 600, "text/plain")
        error = big.value.body["error"]
        assert big.value.status == 429 and (error["quota"], error["limit"]) == ("upload_bytes_per_day", 1000)
    finally:
        for client in (one, one_elsewhere, other):
            await client.close()


def _usage_events(kafka: KafkaSettings) -> list[UsageRecorded]:
    """Every UsageRecorded on the stack's chat.usage, read to the end."""
    name = kafka.topic("chat.usage")
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"usage-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        parts = [TopicPartition(name, p, OFFSET_BEGINNING) for p in range(TOPICS["chat.usage"].partitions)]
        c.assign(parts)
        marks = {p.partition: watermarks(c, p, 10) for p in parts}
        out: list[UsageRecorded] = []
        for msg in read_until(c, {(name, p): high for p, (low, high) in marks.items() if high > low}, 60):
            event = codec.decode(msg.value())
            if isinstance(event, UsageRecorded):
                out.append(event)
        return out
    finally:
        c.close()


async def test_get_usage_equals_the_sum_of_the_users_usage_events(quotas: Quotas) -> None:
    user_id, key = quotas.inner.create_user("usage", "enterprise")
    client = ParleyClient(quotas.urls[0], key)
    try:
        cid = await client.create_conversation("usage")
        for i in range(3):
            reply = await client.send(cid, f"turn {i}")
            assert reply.final is not None and reply.final.event == "done"

        expected: dict[str, Any] = {}
        deadline = time.monotonic() + DEADLINE_S
        while True:
            mine = [e for e in _usage_events(quotas.kafka) if e.user_id == user_id]
            totals = fold(mine)
            expected = {
                (day.isoformat(), model): (t.requests, t.prompt_tokens, t.cached_tokens, t.completion_tokens)
                for (_, day, model), t in totals.items()
            }
            answers = []
            for url in quotas.urls:  # both gateways read the same rows
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
                    r = await http.get("/v1/usage", params={"days": 2})
                assert r.status_code == 200, r.text
                answers.append(r.json())
            got = [
                {(row["day"], row["model"]): (row["requests"], row["prompt_tokens"], row["cached_tokens"], row["completion_tokens"]) for row in ans["usage"]}
                for ans in answers
            ]
            if len(mine) == 3 and got[0] == got[1] == expected:
                break
            assert time.monotonic() < deadline, f"GET /v1/usage {got} never matched chat.usage {expected}"
            await asyncio.sleep(0.5)

        body = answers[0]
        assert body["totals"]["requests"] == 3
        assert body["totals"]["total_tokens"] == sum(t.total_tokens for t in totals.values())
        assert body["quotas"]["tokens_per_day"]["limit"] is None  # enterprise: unlimited
        assert body["quotas"]["tokens_per_day"]["used"] == sum(
            t.total_tokens for (_, day, _), t in totals.items() if day.isoformat() == body["to"]
        )
        async with httpx.AsyncClient(base_url=quotas.urls[1], headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            bad = await http.get("/v1/usage", params={"days": 0})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_days"
    finally:
        await client.close()
