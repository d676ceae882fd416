"""`parley capacity`: the seeds' back-of-envelope numbers from their own inputs, the model's arithmetic, and
Parley's measured figures read from bench/results."""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import fields, replace
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench import fanout
from bench.results import record
from moderation.settings import ModerationSettings
from schemas.catalog import TOPICS
from streams.settings import MaterializerSettings
from tools.capacity import measured, model
from tools.capacity.model import DAY_S, Inputs, Measured, plan
from tools.capacity_cli import capacity
from workers.settings import WorkerSettings

app = typer.Typer()
app.command()(capacity)
runner = CliRunner()

#: Figures as the benchmarks would write them (round numbers, to check the arithmetic by hand).
FIGURES = {
    "fanout": {"streams_per_gateway": 500.0},
    "processors": {"materializer_events_per_s": 1000.0, "context_events_per_s": 2000.0},
    "replay": {"rebuild_writes_per_s": 10_000.0, "projection_writes_per_message": 7.0, "write_through_writes_per_message": 4.0},
    "storage": {"disk_bytes_per_message": 600.0, "disk_bytes_per_reply_token": 5.0},
}


def invoke(*args: str, results: Path) -> dict:
    result = runner.invoke(app, [*args, "--results-dir", str(results), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def near(value: float, seed: float, within: float = 0.05) -> bool:
    """The seeds round (~1.6k, ~5k): a figure within 5 % of the seed's is the seed's."""
    return abs(value - seed) <= within * seed


def write_results(root: Path, figures: dict[str, dict[str, float]] = FIGURES) -> Path:
    for name, values in figures.items():
        record(name, values, baseline={"something": 1.0}, command=f"python -m bench.{name}", results_dir=root)
    return root


# ---------------------------------------------------------------- the seeds, through the CLI


def test_seed_004_from_the_defaults(tmp_path: Path) -> None:
    """100M weekly users × 10 messages → ~1.6k/s average, ~5k/s peak; × 500 tokens → 2.5M tokens/s; ÷ 2.5k → ~1,000 GPUs."""
    out = invoke(results=tmp_path)
    assert near(out["average_messages_per_s"], 1600)
    assert near(out["peak_messages_per_s"], 5000)
    assert near(out["output_tokens_per_s"], 2.5e6)
    assert near(out["decode_gpus"], 1000)
    assert out["gpus_after_redundancy"] > out["decode_gpus"]  # "before redundancy": the seed's figure is the floor


def test_seed_004_from_its_inputs_given_as_flags(tmp_path: Path) -> None:
    out = invoke("--weekly-users", "100e6", "--messages-per-user-week", "10", "--peak-factor", "3", "--output-tokens", "500",
                 "--decode-tokens-per-gpu", "2500", results=tmp_path)
    assert (round(out["average_messages_per_s"]), round(out["peak_messages_per_s"])) == (1653, 4960)
    assert round(out["output_tokens_per_s"]) == 2_480_159
    assert math.ceil(out["decode_gpus"]) == 993


def test_seed_000_from_its_inputs(tmp_path: Path) -> None:
    """100M daily users × 15 messages → 17.4k/s; its design peak of 139k/s is × 8."""
    out = invoke("--daily-users", "100e6", "--messages-per-user-day", "15", "--peak-factor", "8", results=tmp_path)
    assert near(out["average_messages_per_s"], 17_400, 0.01)
    assert near(out["peak_messages_per_s"], 139_000, 0.01)


def test_seed_000s_live_generations_are_littles_law_at_50_tokens_a_second(tmp_path: Path) -> None:
    """The seed states no reply length or speed; its ~1.5M live generations are 139k/s × ~10.8 s each: seed
    004's 500-token reply at 50 tokens/s after a 1 s first token gives 11 s, 1.53M."""
    out = invoke("--daily-users", "100e6", "--messages-per-user-day", "15", "--peak-factor", "8",
                 "--stream-tokens-per-s", "50", "--ttft-s", "1", results=tmp_path)
    assert near(out["concurrent_generations"], 1.5e6)


def test_the_printed_plan_says_every_unit_in_words(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--results-dir", str(write_results(tmp_path))])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for unit in ("messages per second", "output tokens per second", "GPUs", "generations", "GPU-hours per day",
                 "per day", "records per second", "gateway processes", "nodes", "terabytes"):
        assert unit in text, unit
    assert "Parley's own sizing for this load" in text
    assert "decode alone, before redundancy: 992 GPUs" in text


def test_the_printed_sizing_names_each_file_and_its_date(tmp_path: Path) -> None:
    write_results(tmp_path)
    date = measured.read(tmp_path).results["fanout"].date[:10]
    text = runner.invoke(app, ["--results-dir", str(tmp_path)]).stdout
    for name in FIGURES:
        assert f"bench/results/{name}.json" in text
    assert date in text


def test_missing_results_name_the_benchmark_to_run_and_print_the_rest(tmp_path: Path) -> None:
    write_results(tmp_path, {k: v for k, v in FIGURES.items() if k != "fanout"})
    result = runner.invoke(app, ["--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "python -m bench.fanout" in result.stdout
    assert "not measured" in result.stdout
    out = invoke(results=tmp_path)
    assert out["parley"]["gateway_pods"] is None
    assert out["parley"]["materializer_instances"] is not None


def test_an_unreadable_result_is_a_message_not_a_crash(tmp_path: Path) -> None:
    write_results(tmp_path)
    (tmp_path / "replay.json").write_text("{not json")
    readings = measured.read(tmp_path)
    assert "replay.json cannot be read" in readings.problems["replay"]
    assert readings.measured.node_writes_per_s is None
    assert readings.measured.streams_per_gateway == 500.0


def test_the_committed_results_hold_every_figure_the_planner_reads() -> None:
    readings = measured.read()
    assert readings.problems == {}
    for source in measured.SOURCES:
        assert getattr(readings.measured, source.field) is not None, source


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--daily-users", "1e6", "--weekly-users", "1e6"], "--daily-users and --weekly-users"),
        (["--messages-per-user-day", "3", "--messages-per-user-week", "10"], "not both"),
        (["--daily-users", "1e6"], "--messages-per-user-day"),
        (["--pool-mix", "small=0.5,medium=0.4"], "add up to 1"),
        (["--pool-mix", "tiny=1"], "unknown pool tiny"),
        (["--pool-mix", "small"], "--pool-mix"),
        (["--decode-tokens-per-gpu", "fast"], "--decode-tokens-per-gpu"),
        (["--pool-mix", "small=0.5,frontier=0.5", "--decode-tokens-per-gpu", "small=3000"], "frontier"),
        (["--cache-hit-rate", "1"], "cache_hit_rate"),
        (["--peak-factor", "0.5"], "peak_factor"),
        (["--output-tokens", "0"], "output_tokens"),
    ],
)
def test_bad_or_mixed_flags_are_refused_by_name(args: list[str], says: str, tmp_path: Path) -> None:
    result = runner.invoke(app, [*args, "--results-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.translate(BOX).split())  # typer draws its errors in a wrapped box


BOX = str.maketrans({c: " " for c in "│╭╮╰╯─"})


# ---------------------------------------------------------------- the model's arithmetic


def seed_004(**changes: object) -> Inputs:
    return replace(Inputs(), **changes)  # type: ignore[arg-type]


def test_messages_per_second_from_users_and_the_period() -> None:
    p = plan(seed_004(users=86_400, messages_per_user=2, period_s=DAY_S, peak_factor=4))
    assert p.average_messages_per_s == pytest.approx(2.0)
    assert p.peak_messages_per_s == pytest.approx(8.0)


def test_littles_law_counts_the_first_token_and_the_decode() -> None:
    p = plan(seed_004(users=DAY_S * 10, messages_per_user=1, period_s=DAY_S, peak_factor=1, ttft_s=0.5,
                      output_tokens=300, stream_tokens_per_s=30))
    assert p.concurrent_generations == pytest.approx(10 * (0.5 + 10))


def test_redundancy_adds_the_headroom_then_whole_replicas() -> None:
    base = dict(users=DAY_S * 100, messages_per_user=1, period_s=DAY_S, peak_factor=1, output_tokens=100,
                decode_tokens_per_gpu={"small": 1000.0}, input_tokens=0, gpus_per_replica=4)
    p = plan(seed_004(**base, headroom=0.25, spare_replicas=1))  # 10,000 tokens/s ÷ 1,000 = 10 GPUs
    (pool,) = p.pools
    assert (pool.decode_gpus, pool.gpus_before, pool.gpus_after) == (10.0, 10, 10 + 3 + 4)  # ceil(12.5) + one replica
    assert pool.replicas == math.ceil(17 / 4)
    assert plan(seed_004(**base, headroom=0, spare_replicas=0)).gpus_after == 10


def test_prefill_counts_only_what_the_cache_misses_and_disaggregation_rounds_each_role() -> None:
    base = dict(users=DAY_S * 10, messages_per_user=1, period_s=DAY_S, peak_factor=1, output_tokens=150, input_tokens=2000,
                cache_hit_rate=0.75, decode_tokens_per_gpu={"small": 1000.0}, prefill_tokens_per_gpu={"small": 2000.0},
                headroom=0, spare_replicas=0)
    colocated = plan(seed_004(**base)).pools[0]
    assert colocated.prefill_tokens_per_s == pytest.approx(10 * 2000 * 0.25)
    assert (colocated.decode_gpus, colocated.prefill_gpus) == (pytest.approx(1.5), pytest.approx(2.5))
    assert (colocated.gpus_before, colocated.decode_gpus_after, colocated.prefill_gpus_after) == (4, 4, 0)  # GPUs shared
    split = plan(seed_004(**base, disaggregated=True)).pools[0]
    assert (split.gpus_before, split.decode_gpus_after, split.prefill_gpus_after) == (5, 2, 3)  # each role whole GPUs
    assert colocated.one_prompt_prefill_s == pytest.approx(500 / 2000)


def test_the_pool_mix_splits_messages_and_each_pool_has_its_own_rate() -> None:
    p = plan(seed_004(pool_mix={"small": 0.6, "medium": 0.3, "frontier": 0.1},
                      decode_tokens_per_gpu={"small": 5000.0, "medium": 2500.0, "frontier": 500.0}))
    by_pool = {x.pool: x for x in p.pools}
    peak_tokens = p.peak_messages_per_s * 500
    assert by_pool["small"].decode_gpus == pytest.approx(peak_tokens * 0.6 / 5000)
    assert by_pool["frontier"].decode_gpus == pytest.approx(peak_tokens * 0.1 / 500)
    assert p.decode_gpus == pytest.approx(sum(x.decode_gpus for x in p.pools))
    assert p.output_tokens_per_s == pytest.approx(peak_tokens)


def test_the_cost_line_is_gpu_hours_times_the_price() -> None:
    p = plan(seed_004(gpu_hour_usd=2.0))
    assert p.gpu_hours_per_day == p.gpus_after * 24
    assert p.usd_per_day == pytest.approx(p.gpus_after * 24 * 2.0)


def test_seed_000s_bill_is_the_default_gpu_price() -> None:
    assert Inputs().gpu_hour_usd * 74_000 * 24 == pytest.approx(5.2e6, rel=0.01)


def test_chat_tokens_records_per_token_match_what_bench_gateways_measured() -> None:
    assert model.records_per_token(30) == pytest.approx(0.42, abs=0.01)
    assert model.records_per_token(1000) == 1 / model.COALESCE_TOKENS
    assert model.records_per_token(5) == 1.0


def default(settings: type, name: str) -> object:
    return {f.name: f.default for f in fields(settings)}[name]


def test_the_models_constants_are_the_settings_defaults() -> None:
    assert model.COALESCE_S * 1000 == default(WorkerSettings, "coalesce_ms")
    assert model.COALESCE_TOKENS == default(WorkerSettings, "coalesce_tokens")
    assert model.CHECKPOINT_S == default(MaterializerSettings, "checkpoint_min_s")
    assert model.MODERATION_WINDOW_TOKENS == default(ModerationSettings, "window_tokens")


def test_partitions_follow_throughput_consumers_and_gateway_shards() -> None:
    p = plan(seed_004(measured=Measured(streams_per_gateway=1000, materializer_events_per_s=500, context_events_per_s=2000)))
    topics = {t.topic: t for t in p.topics}
    assert not any(name.endswith(".dlq") for name in topics)
    assert set(topics) == {n for n in TOPICS if not n.endswith(".dlq")}
    tokens = topics["chat.tokens"]
    assert p.parley.gateway_pods == math.ceil(p.concurrent_generations * 1.2 / 1000)
    assert tokens.partitions == max(model.SHARD_PARTITIONS * p.parley.gateway_pods,
                                    math.ceil(tokens.bytes_per_s / 3e6), math.ceil(tokens.records_per_s / 10_000))
    events = topics["chat.events"]
    assert events.records_per_s == pytest.approx(p.peak_messages_per_s * 3)
    assert p.parley.materializer_instances == math.ceil(events.records_per_s * 1.2 / 500)
    assert (events.partitions, events.bound) == (p.parley.materializer_instances, "materializer instances")
    assert topics["chat.inference.small"].partitions == p.pools[0].replicas
    assert topics["chat.inference.medium"].bound.startswith("no turns in this pool mix")
    assert topics["fleet.heartbeats"].partitions == TOPICS["fleet.heartbeats"].partitions


def test_cassandra_nodes_are_the_larger_of_writes_and_storage_and_at_least_the_replicas() -> None:
    figures = Measured(node_writes_per_s=10_000, projection_writes_per_message=7, write_through_writes_per_message=4,
                       disk_bytes_per_message=600, disk_bytes_per_reply_token=5)
    p = plan(seed_004(measured=figures))
    s = p.parley
    checkpoints = 500 / 30 / model.CHECKPOINT_S
    assert s.writes_per_message == pytest.approx(7 + 4 + checkpoints)
    assert s.peak_replica_writes_per_s == pytest.approx(p.peak_messages_per_s * (11 + checkpoints) * 3)
    assert s.cassandra_nodes_for_writes == math.ceil(s.peak_replica_writes_per_s * 1.2 / 10_000)
    stored = p.average_messages_per_s * DAY_S * 365 * (600 + 5 * 500) * 3
    assert s.stored_tb == pytest.approx(stored / 1e12)
    assert s.cassandra_nodes_for_storage == math.ceil(stored / (2000e9 * 0.5))
    assert s.cassandra_nodes == max(s.cassandra_nodes_for_writes, s.cassandra_nodes_for_storage)
    tiny = plan(seed_004(users=1000, measured=figures)).parley
    assert (tiny.cassandra_nodes_for_writes, tiny.cassandra_nodes_for_storage) == (3, 3)


def test_without_measured_figures_parleys_sizing_is_unknown_not_zero() -> None:
    s = plan(Inputs()).parley
    assert (s.gateway_pods, s.materializer_instances, s.cassandra_nodes, s.stored_tb) == (None, None, None, None)


# ---------------------------------------------------------------- the results files


def test_a_recorded_result_reads_back_with_where_it_came_from(tmp_path: Path) -> None:
    path = record("fanout", {"streams_per_gateway": 300}, baseline={"lag_p99_ms": 20.0}, command="python -m bench.fanout",
                  results_dir=tmp_path)
    result = measured.Result.from_json(path.read_text())
    assert (result.name, result.figures, result.baseline, result.command) == (
        "fanout", {"streams_per_gateway": 300.0}, {"lag_p99_ms": 20.0}, "python -m bench.fanout")
    assert result.host_cores >= 1 and result.date[:2] == "20" and result.git_commit
    assert measured.read(tmp_path).measured.streams_per_gateway == 300.0


def test_the_gateways_knee_is_the_last_step_it_met_the_bar_at_before_failing_it_alone() -> None:
    def step(n: int, gateway_ms: float, baseline_ms: float) -> fanout.Result:
        return fanout.Result(n=n, lags=array("d", [gateway_ms / 1000]), baseline=array("d", [baseline_ms / 1000]))

    assert fanout.knee([step(100, 20, 10), step(200, 90, 10), step(300, 150, 10)]).n == 200  # type: ignore[union-attr]
    assert fanout.knee([step(100, 20, 10), step(200, 150, 10), step(300, 50, 10)]).n == 100  # type: ignore[union-attr]
    # The machine stalled every reader at 100 (the baseline too): that step says nothing about the gateway.
    assert fanout.knee([step(100, 500, 560), step(150, 50, 30), step(200, 400, 40)]).n == 150  # type: ignore[union-attr]
    assert fanout.knee([step(100, 300, 10), step(200, 50, 10)]) is None
