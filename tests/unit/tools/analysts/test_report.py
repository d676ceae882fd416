"""Report math against numpy over the same turn records; charts plot exactly the report's numbers; files round-trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parley.errors import ConfigError
from schemas import sealing
from tests.unit.schemas.test_sealing import Reversible, keys  # noqa: F401 (the fixture)
from tools.analysts import charts, replay, report, sample, turns


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return [t.to_record() for t in turns.fold(s.event for s in sample.session(30, 6))]


@pytest.mark.parametrize("q", [0, 37.5, 50, 95, 99, 100])
def test_percentile_is_numpys_linear_percentile(q: float) -> None:
    values = [5.0, 1.0, 9.5, 3.25, 7.0, 7.0, 120.0]
    assert report.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_numbers_equal_a_direct_computation(records: list[dict]) -> None:
    r = report.compute(records, report.DEFAULT_PRICES)
    assert r.turns == len(records)
    for row in r.ttft:
        values = [t["ttft_ms"] for t in records if t["model"] == row.model and t["cache"] == row.cache and t["ttft_ms"] is not None]
        assert row.turns == len(values)
        assert (row.p50, row.p95, row.p99) == pytest.approx(tuple(np.percentile(values, [50, 95, 99])))
    assert {row.cache for row in r.ttft} == {"hit", "miss"}
    placed = [t for t in records if t["route_reason"]]
    for pool, share in r.routing_mix.items():
        assert share == pytest.approx(sum(t["pool"] == pool for t in placed) / len(placed))
    assert r.shed_rate == pytest.approx(np.mean([t["shed"] for t in records])) and r.shed_rate > 0
    assert r.downgrade_rate == pytest.approx(np.mean([t["downgraded"] for t in records])) and r.downgrade_rate > 0
    by_hand = 0.0
    for t in records:
        p = report.DEFAULT_PRICES[t["pool"]] if t["pool"] else None
        if p:
            by_hand += ((t["prompt_tokens"] - t["cached_tokens"]) * p.prompt + t["cached_tokens"] * p.cached + t["completion_tokens"] * p.completion) / 1e6
    assert r.cost_per_1k_turns == pytest.approx(by_hand / len(records) * 1000)
    assert sum(r.cost_per_1k_by_pool.values()) == pytest.approx(r.cost_per_1k_turns)
    for row in r.tokens_per_s:
        rates = [t["tokens_per_s"] for t in records if t["model"] == row.model and t["tokens_per_s"] is not None]
        assert row.mean == pytest.approx(np.mean(rates)) and row.p50 == pytest.approx(np.median(rates))


def test_charts_are_written_and_plot_the_report(records: list[dict], tmp_path: Path) -> None:
    r = report.compute(records, report.DEFAULT_PRICES)
    names = charts.draw(r, tmp_path)
    assert names == [charts.TTFT, charts.SPEED, charts.MIX, charts.COST]
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = charts.series(r)
    assert data[charts.MIX]["share of turns"]["shed"] == r.shed_rate
    assert list(data[charts.TTFT]["p99"].values()) == [row.p99 for row in r.ttft]
    md = report.markdown(r, "x.jsonl", names, report.DEFAULT_PRICES)
    assert "## Time to first token" in md and f"![{charts.TTFT}]({charts.TTFT})" in md


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_replay_files_round_trip(records: list[dict], tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"turns{suffix}"
    replay.write(records, path)
    assert replay.load(path) == records


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_replay_file_holds_its_texts_sealed_and_they_read_erased_after_an_erasure(
    records: list[dict], tmp_path: Path, suffix: str, keys: Reversible
) -> None:
    """The file is kept wherever an analyst puts it, out of every store an erasure purges: its texts are
    sealed under each turn's user, so the shred reaches it as it reaches the log (review H8.6)."""
    texts = [t for r in records for t in (r["user_message"], r["content"], *(m["content"] for m in r["prompt"])) if t]
    canary = next(t for t in texts if len(t) > 8)
    path = tmp_path / f"turns{suffix}"
    replay.write(records, path)
    again = tmp_path / f"again{suffix}"
    replay.write(records, again)
    assert path.read_bytes() == again.read_bytes()  # the same turns, the same file
    if suffix == ".jsonl":
        assert canary not in path.read_text()
    assert replay.load(path) == records
    assert report.compute(replay.load(path, texts=False), report.DEFAULT_PRICES) == report.compute(records, report.DEFAULT_PRICES)
    erased = records[0]["user_id"]
    keys.erased.add(erased)
    for r in replay.load(path):
        if r["user_id"] == erased:
            assert {r["user_message"], r["content"], *(m["content"] for m in r["prompt"])} <= {sealing.ERASED, "", None}
        else:
            assert r == next(x for x in records if x["request_id"] == r["request_id"])
    plain = tmp_path / "plain.jsonl"
    replay.write(records, plain, sealing.UNSEALED)  # parley replay --plain: the analyst's to delete
    assert canary in plain.read_text()


def test_a_price_table_is_read_and_a_bad_one_names_the_problem(tmp_path: Path) -> None:
    good = tmp_path / "prices.toml"
    good.write_text('[small]\nprompt = 1\ncompletion = 2\n["Qwen/Qwen2.5-7B-Instruct"]\nprompt = 3\ncached = 1\ncompletion = 4\n')
    table = report.load_prices(good)
    assert table["small"] == report.Price(1.0, 1.0, 2.0) and table["Qwen/Qwen2.5-7B-Instruct"].cached == 1.0
    bad = tmp_path / "bad.toml"
    bad.write_text("[small]\nprompt = 'cheap'\n")
    with pytest.raises(ConfigError, match=r"\[small\]"):
        report.load_prices(bad)


def test_feedback_counts_thumbs_and_what_users_did_instead_by_pool_model_and_cache() -> None:
    def turn(rid: str, mid: str, at: int, *, kind: str = "message", parent: str | None = "p0", **extra: object) -> dict:
        base = {"request_id": rid, "conversation_id": "c", "user_message_id": mid, "user_parent_id": parent, "kind": kind,
                "requested_at": at, "pool": "small", "model": "m", "cache": "miss", "finish_reason": "stop", "feedback": None,
                "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "ttft_ms": None, "tokens_per_s": None,
                "route_reason": "", "downgraded": False, "shed": False}
        return base | extra

    records = [
        turn("r1", "m1", 1, feedback="down"),  # then regenerated
        turn("r2", "m1", 2, kind="regenerate", feedback="up"),
        turn("r3", "m3", 3, parent="r2"),  # then edited: m3b under the same parent
        turn("r3b", "m3b", 4, parent="r2", finish_reason="cancelled"),
        turn("r5", "m5", 5, parent="r3b", pool="medium", model="big", cache="hit", feedback="up"),
    ]
    rows = {(f.pool, f.model, f.cache): f for f in report.compute(records, report.DEFAULT_PRICES).feedback}
    small, medium = rows[("small", "m", "miss")], rows[("medium", "big", "hit")]
    assert (small.turns, small.up, small.down, small.regenerated, small.edited, small.stopped) == (4, 1, 1, 1, 1, 1)
    assert (medium.turns, medium.up, medium.down, medium.regenerated, medium.edited, medium.stopped) == (1, 1, 0, 0, 0, 0)
    text = report.markdown(report.compute(records, report.DEFAULT_PRICES), "test", [], report.DEFAULT_PRICES)
    assert "| small | m | miss | 4 | 1 (25.0%) | 1 (25.0%) | 25.0% | 25.0% | 25.0% |" in text
