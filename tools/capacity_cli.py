"""`parley capacity`: the fleet a load needs, and Parley's own processes for it from measured figures.

The arithmetic is tools/capacity/model.py (docs/capacity.md writes it out); this module turns flags
into its inputs and its plan into tables (or JSON). The defaults are seed 004's load.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from schemas.catalog import POOLS
from tools.capacity import measured as measured_files
from tools.capacity.model import DAY_S, WEEK_S, Inputs, Plan, plan

SEED_WEEKLY_USERS = 100e6
SEED_MESSAGES_PER_USER_WEEK = 10.0


def per_pool(text: str, flag: str) -> dict[str, float]:
    """``2500`` (every pool) or ``small=6000,medium=2500,frontier=800`` (pure)."""
    try:
        if "=" not in text:
            return {p: float(text) for p in POOLS}
        out = {}
        for part in text.split(","):
            pool, value = part.split("=")
            out[pool.strip()] = float(value)
        return out
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give a number, or pool=number pairs such as small=0.6,medium=0.4",
                                 param_hint=flag) from None


def load_flags(
    weekly_users: float | None, messages_per_user_week: float | None,
    daily_users: float | None, messages_per_user_day: float | None,
) -> tuple[float, float, float]:
    """(users, messages per user, period in seconds) from the two ways to give a load; refuses a mix."""
    weekly = {"--weekly-users": weekly_users, "--messages-per-user-week": messages_per_user_week}
    daily = {"--daily-users": daily_users, "--messages-per-user-day": messages_per_user_day}
    given_weekly = [f for f, v in weekly.items() if v is not None]
    given_daily = [f for f, v in daily.items() if v is not None]
    if given_weekly and given_daily:
        raise typer.BadParameter(
            f"{', '.join(given_daily)} and {', '.join(given_weekly)} describe the load twice: give the daily pair "
            "or the weekly pair, not both")
    if given_daily:
        if len(given_daily) < 2:
            missing = next(f for f in daily if f not in given_daily)
            raise typer.BadParameter(f"{given_daily[0]} needs {missing} too")
        return daily_users, messages_per_user_day, DAY_S  # type: ignore[return-value]
    users = SEED_WEEKLY_USERS if weekly_users is None else weekly_users
    messages = SEED_MESSAGES_PER_USER_WEEK if messages_per_user_week is None else messages_per_user_week
    return users, messages, WEEK_S


def capacity(
    weekly_users: float | None = typer.Option(None, help="Active users per week [default: 100e6, seed 004's]"),
    messages_per_user_week: float | None = typer.Option(None, help="Messages each sends per week [default: 10]"),
    daily_users: float | None = typer.Option(None, help="Active users per day (instead of the weekly pair)"),
    messages_per_user_day: float | None = typer.Option(None, help="Messages each sends per day"),
    peak_factor: float = typer.Option(3.0, help="Peak messages/s ÷ average (seed 004: ~5k ÷ ~1.6k)"),
    output_tokens: float = typer.Option(500.0, help="Output tokens per reply"),
    input_tokens: float = typer.Option(1000.0, help="Input tokens per prompt (system, memory, summary, recent turns)"),
    cache_hit_rate: float = typer.Option(0.5, help="Share of input tokens the prefix cache holds"),
    pool_mix: str = typer.Option("small=1", help="Share of messages per pool: small=0.6,medium=0.3,frontier=0.1"),
    decode_tokens_per_gpu: str = typer.Option("2500", help="Decode tokens/s per GPU, batched: a number or pool=number,…"),
    prefill_tokens_per_gpu: str = typer.Option("10000", help="Prefill tokens/s per GPU: a number or pool=number,…"),
    disaggregated: bool = typer.Option(False, "--disaggregated/--colocated", help="Prefill and decode on GPUs of their own"),
    ttft_s: float = typer.Option(1.0, help="SLO: seconds to the first token"),
    stream_tokens_per_s: float = typer.Option(30.0, help="SLO: output tokens per second of each stream"),
    headroom: float = typer.Option(0.2, help="Capacity above the need, as a fraction, for every fleet"),
    spare_replicas: int = typer.Option(1, help="Whole engine replicas per pool and role on top (N+1)"),
    gpus_per_replica: int = typer.Option(8, help="GPUs of one engine replica"),
    gpu_hour_usd: float = typer.Option(2.93, help="US dollars per GPU-hour (seed 000: $5.2M/day ÷ 74,000 GPUs ÷ 24 h)"),
    replication_factor: int = typer.Option(3, help="Cassandra replication factor"),
    retention_days: float = typer.Option(365.0, help="Days conversations are kept"),
    disk_per_node_gb: float = typer.Option(2000.0, help="Disk per Cassandra node, gigabytes"),
    disk_fill: float = typer.Option(0.5, help="Share of a node's disk data may fill"),
    partition_records_per_s: float = typer.Option(10_000.0, help="Records/s one Kafka partition is given"),
    partition_mb_per_s: float = typer.Option(3.0, help="Megabytes/s one Kafka partition is given"),
    results_dir: Path = typer.Option(measured_files.RESULTS_DIR, help="Where the benchmarks' figures are"),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON"),
) -> None:
    """The GPUs, Kafka partitions, gateways, processors and Cassandra nodes a load needs, and what they cost a day."""
    users, messages_per_user, period_s = load_flags(weekly_users, messages_per_user_week, daily_users, messages_per_user_day)
    readings = measured_files.read(results_dir)
    try:
        inputs = Inputs(
            users=users, messages_per_user=messages_per_user, period_s=period_s, peak_factor=peak_factor,
            output_tokens=output_tokens, input_tokens=input_tokens, cache_hit_rate=cache_hit_rate,
            pool_mix=per_pool(pool_mix, "--pool-mix"),
            decode_tokens_per_gpu=per_pool(decode_tokens_per_gpu, "--decode-tokens-per-gpu"),
            prefill_tokens_per_gpu=per_pool(prefill_tokens_per_gpu, "--prefill-tokens-per-gpu"),
            disaggregated=disaggregated, ttft_s=ttft_s, stream_tokens_per_s=stream_tokens_per_s, headroom=headroom,
            spare_replicas=spare_replicas, gpus_per_replica=gpus_per_replica, gpu_hour_usd=gpu_hour_usd,
            replication_factor=replication_factor, retention_days=retention_days, disk_per_node_gb=disk_per_node_gb,
            disk_fill=disk_fill, partition_records_per_s=partition_records_per_s, partition_mb_per_s=partition_mb_per_s,
            measured=readings.measured,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    result = plan(inputs)
    if as_json:
        print(json.dumps(to_json(inputs, result, readings), indent=2))
        return
    out = Console(width=None if sys.stdout.isatty() else 160)
    render(out, inputs, result, readings)


# ---------------------------------------------------------------- rendering


def _n(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}".rstrip("0").rstrip(".")


def to_json(inputs: Inputs, p: Plan, readings: measured_files.Readings) -> dict:
    return {
        "inputs": asdict(inputs),
        "average_messages_per_s": p.average_messages_per_s,
        "peak_messages_per_s": p.peak_messages_per_s,
        "output_tokens_per_s": p.output_tokens_per_s,
        "prefill_tokens_per_s": p.prefill_tokens_per_s,
        "concurrent_generations": p.concurrent_generations,
        "decode_gpus": p.decode_gpus,
        "gpus_before_redundancy": p.gpus_before,
        "gpus_after_redundancy": p.gpus_after,
        "gpu_hours_per_day": p.gpu_hours_per_day,
        "usd_per_day": p.usd_per_day,
        "pools": [{**asdict(pool), "gpus_after": pool.gpus_after} for pool in p.pools],
        "topics": [asdict(t) for t in p.topics],
        "parley": {**asdict(p.parley), "cassandra_nodes": p.parley.cassandra_nodes},
        "measured_from": {
            name: {"path": str(measured_files.path_of(name, Path("bench/results"))), "date": r.date, "command": r.command,
                   "git_commit": r.git_commit, "host_cores": r.host_cores}
            for name, r in readings.results.items()
        },
        "not_measured": readings.problems,
    }


def render(out: Console, inputs: Inputs, p: Plan, readings: measured_files.Readings) -> None:
    load = Table("figure", "value", "unit", title="The load", title_justify="left")
    load.add_row("average", _n(p.average_messages_per_s), "messages per second")
    load.add_row(f"peak (× {inputs.peak_factor:g})", _n(p.peak_messages_per_s), "messages per second")
    load.add_row("output at peak", _n(p.output_tokens_per_s), "output tokens per second")
    load.add_row("prefill at peak (not in the cache)", _n(p.prefill_tokens_per_s), "input tokens per second")
    load.add_row(
        f"concurrent generations at peak (Little's law: peak × ({inputs.ttft_s:g} s + "
        f"{inputs.output_tokens:g} tokens ÷ {inputs.stream_tokens_per_s:g} tokens per second))",
        _n(p.concurrent_generations), "generations")
    out.print(load)

    gpus = Table("pool", "peak messages per second", "output tokens per second", "decode GPUs", "prefill GPUs",
                 "GPUs before redundancy", "GPUs after redundancy", "streams per decode GPU", "engine replicas",
                 title=f"GPUs ({'prefill and decode disaggregated' if inputs.disaggregated else 'prefill and decode on the same GPUs'};"
                       f" after: +{inputs.headroom:.0%}, then +{inputs.spare_replicas} replica of {inputs.gpus_per_replica} GPUs)",
                 title_justify="left")
    for pool in p.pools:
        after = (f"{pool.decode_gpus_after:,} decode + {pool.prefill_gpus_after:,} prefill" if inputs.disaggregated
                 else f"{pool.gpus_after:,}")
        gpus.add_row(pool.pool, _n(pool.peak_messages_per_s), _n(pool.output_tokens_per_s), _n(pool.decode_gpus),
                     _n(pool.prefill_gpus), f"{pool.gpus_before:,}", after, _n(pool.streams_per_decode_gpu), f"{pool.replicas:,}")
    gpus.add_row("all", _n(p.peak_messages_per_s), _n(p.output_tokens_per_s), _n(p.decode_gpus),
                 _n(sum(x.prefill_gpus for x in p.pools)), f"{p.gpus_before:,}", f"{p.gpus_after:,}", "", "", style="bold")
    out.print(gpus)
    out.print(f"decode alone, before redundancy: {p.decode_gpus:,.0f} GPUs "
              f"({p.output_tokens_per_s:,.0f} output tokens per second ÷ the pools' decode tokens per second per GPU)")
    for pool in p.pools:
        if pool.one_prompt_prefill_s > inputs.ttft_s:
            out.print(f"[yellow]{pool.pool}: one prompt's prefill takes {pool.one_prompt_prefill_s:.2f} s on one GPU, over the "
                      f"{inputs.ttft_s:g} s TTFT SLO: prefill each prompt on more GPUs (tensor parallel) or cache more of it[/]")
    out.print(f"cost: {p.gpus_after:,} GPUs × 24 h = {p.gpu_hours_per_day:,.0f} GPU-hours per day × "
              f"${p.gpu_hour_usd:g} per GPU-hour = [bold]${p.usd_per_day:,.0f} per day[/] (GPUs only)")

    topics = Table("topic", "records per second at peak", "megabytes per second", "partitions", "set by", "catalog today",
                   title=f"Kafka partitions (a partition given {inputs.partition_records_per_s:,.0f} records per second and "
                         f"{inputs.partition_mb_per_s:g} megabytes per second; each dead-letter topic: 1)", title_justify="left")
    for t in p.topics:
        topics.add_row(t.topic, _n(t.records_per_s), _n(t.bytes_per_s / 1e6), f"{t.partitions:,}", t.bound, str(t.catalog_partitions))
    out.print(topics)
    render_parley(out, inputs, p, readings)


def _from(readings: measured_files.Readings, *fields: str) -> str:
    """The measured figures behind a row, with the file and the day each was measured."""
    by_file: dict[str, list[str]] = {}
    for s in measured_files.SOURCES:
        if s.field not in fields:
            continue
        value = getattr(readings.measured, s.field)
        if value is None:
            return f"not measured: bench.{s.bench} (below)"
        by_file.setdefault(s.bench, []).append(f"{_n(value)} {s.meaning}")
    return "; ".join(
        f"{', '.join(parts)} (bench/results/{bench}.json, {readings.results[bench].date[:10]})" for bench, parts in by_file.items()
    )


def render_parley(out: Console, inputs: Inputs, p: Plan, readings: measured_files.Readings) -> None:
    s = p.parley
    table = Table("figure", "value", "unit", "from", title="Parley's own sizing for this load (from measured figures; "
                  f"+{inputs.headroom:.0%} headroom)", title_justify="left")

    def row(what: str, value: float | None, unit: str, *fields: str) -> None:
        table.add_row(what, "-" if value is None else _n(value), unit, _from(readings, *fields))

    row("gateway pods", s.gateway_pods, "gateway processes", "streams_per_gateway")
    row("materializer instances", s.materializer_instances, "processes", "materializer_events_per_s")
    row("context builder instances", s.context_instances, "processes", "context_events_per_s")
    row("Cassandra writes per posted message", s.writes_per_message, "writes (projection, write-through, "
        "one checkpoint a second of streaming)", "projection_writes_per_message", "write_through_writes_per_message")
    row(f"Cassandra writes at peak (× {inputs.replication_factor} replicas)", s.peak_replica_writes_per_s,
        "writes per second", "projection_writes_per_message")
    row("Cassandra nodes for the writes", s.cassandra_nodes_for_writes, "nodes", "node_writes_per_s")
    row(f"stored over {inputs.retention_days:g} days (× {inputs.replication_factor} replicas)", s.stored_tb, "terabytes",
        "disk_bytes_per_message", "disk_bytes_per_reply_token")
    row(f"Cassandra nodes for the storage ({inputs.disk_per_node_gb:,.0f} GB each, {inputs.disk_fill:.0%} full)",
        s.cassandra_nodes_for_storage, "nodes", "disk_bytes_per_message")
    row("Cassandra nodes", s.cassandra_nodes, "nodes", "node_writes_per_s", "disk_bytes_per_message")
    out.print(table)
    for bench, problem in readings.problems.items():
        out.print(f"[yellow]bench.{bench}:[/] {problem}", highlight=False)
    for bench, result in readings.results.items():
        commit = result.git_commit[:12] + (" with uncommitted changes" if result.git_commit.endswith("-dirty") else "")
        out.print(f"bench/results/{bench}.json: {result.date}, {result.host_cores} cores, commit {commit}: {result.command}",
                  highlight=False)
