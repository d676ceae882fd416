"""The usage fold: UsageRecorded → rows → totals per user, day and model, the same under redelivery."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import date, datetime, timezone

import pytest

from schemas.events import GenerationCompleted, Usage, UsageRecorded
from streams.settings import UsageSettings
from streams.usage import UsageFolder
from streams.usage_fold import Totals, UsageRow, fold, latest_rows, row_for, totals, utc_day

NOON = int(datetime(2025, 3, 1, 12, tzinfo=timezone.utc).timestamp() * 1_000_000)
DAY_US = 86_400 * 1_000_000


def recorded(request_id: str, *, user: str = "u1", model: str = "m", attempt: int = 0, at: int = NOON,
             prompt: int = 10, cached: int = 4, completion: int = 5) -> UsageRecorded:  # fmt: skip
    return UsageRecorded(
        conversation_id="c1",
        user_id=user,
        request_id=request_id,
        attempt=attempt,
        model=model,
        pool="small",
        usage=Usage(prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion),
        occurred_at=at,
    )


def test_the_day_is_the_utc_day_of_the_event() -> None:
    assert utc_day(NOON) == date(2025, 3, 1)
    assert utc_day(NOON + DAY_US // 2) == date(2025, 3, 2)  # midnight UTC, whatever the local zone
    assert row_for(recorded("r", at=NOON + DAY_US // 2 - 1)).key.day == date(2025, 3, 1)


def test_totals_per_user_day_and_model() -> None:
    events = [
        recorded("r1"),
        recorded("r2", model="big", prompt=100, cached=0, completion=50),
        recorded("r3", completion=7),
        recorded("r4", at=NOON + DAY_US),
        recorded("r5", user="u2"),
    ]
    out = fold(events)
    d1, d2 = date(2025, 3, 1), date(2025, 3, 2)
    assert out == {
        ("u1", d1, "m"): Totals(requests=2, prompt_tokens=20, cached_tokens=8, completion_tokens=12),
        ("u1", d1, "big"): Totals(requests=1, prompt_tokens=100, cached_tokens=0, completion_tokens=50),
        ("u1", d2, "m"): Totals(requests=1, prompt_tokens=10, cached_tokens=4, completion_tokens=5),
        ("u2", d1, "m"): Totals(requests=1, prompt_tokens=10, cached_tokens=4, completion_tokens=5),
    }
    assert out[("u1", d1, "big")].total_tokens == 150  # cached tokens are part of the prompt's


def test_redelivery_in_any_order_and_amount_leaves_the_totals_as_once() -> None:
    events = [recorded(f"r{i}", model=f"m{i % 3}", prompt=i, completion=2 * i) for i in range(30)]
    once = fold(events)
    rng = random.Random(7)
    for _ in range(5):
        redelivered = events + rng.choices(events, k=40)
        rng.shuffle(redelivered)
        assert fold(redelivered) == once


def test_a_resumed_attempt_counts_again_and_a_re_emitted_one_replaces_itself() -> None:
    first = recorded("r1", attempt=0, completion=3)
    resumed = recorded("r1", attempt=1, completion=9)
    assert fold([first, resumed])[("u1", date(2025, 3, 1), "m")] == Totals(2, 20, 8, 12)
    # The same attempt reported again later (a worker that re-ran it) replaces the earlier row: latest wins.
    again = replace(first, event_id="other", occurred_at=NOON + 1, usage=Usage(prompt_tokens=10, completion_tokens=4))
    rows = latest_rows([again, first, resumed])
    assert rows[row_for(first).key].completion_tokens == 4


def test_equal_timestamps_merge_cell_by_cell_like_cassandra() -> None:
    a = recorded("r1", prompt=10, completion=1)
    b = replace(a, event_id="b", usage=Usage(prompt_tokens=3, completion_tokens=8))
    (row,) = latest_rows([a, b]).values()
    assert (row.prompt_tokens, row.completion_tokens) == (10, 8)
    assert latest_rows([b, a]) == latest_rows([a, b])


def test_a_record_no_user_can_be_charged_for_is_refused() -> None:
    with pytest.raises(ValueError, match="user_id"):
        row_for(recorded("r1", user=""))
    with pytest.raises(ValueError, match="request_id"):
        row_for(recorded(""))
    with pytest.raises(ValueError, match="negative"):
        row_for(recorded("r1", prompt=-1))
    assert row_for(replace(recorded("r1"), model="", pool="")).key.model == "unknown"
    assert row_for(replace(recorded("r1"), model="")).key.model == "small"  # the pool, when the model is unnamed


class Rows:
    """An in-memory usage_by_request: the upsert semantics the processor relies on."""

    def __init__(self) -> None:
        self.rows: dict = {}

    async def record(self, row: UsageRow) -> None:
        held = self.rows.get(row.key)
        if held is None or row.occurred_at >= held.occurred_at:
            self.rows[row.key] = row


def test_the_folder_writes_one_row_per_attempt_and_refuses_other_events() -> None:
    store = Rows()
    folder = UsageFolder(UsageSettings(), store)
    events = [recorded("r1"), recorded("r2"), recorded("r1")]

    async def run() -> None:
        for e in events:
            await folder.handle(e)
        with pytest.raises(TypeError):
            await folder.handle(GenerationCompleted(conversation_id="c", user_id="u", request_id="r", parent_id="p"))

    asyncio.run(run())
    assert len(store.rows) == 2
    assert totals(store.rows.values()) == fold(events)
