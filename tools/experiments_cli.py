"""``parley experiments start|stop|list``: controlled experiments on the router (issue 38 item 5).

An experiment is two events on ``ops.experiments``: ``ExperimentStarted`` (its arms, shares and overrides,
the tiers that take part) and ``ExperimentStopped``. Gateways fold the topic and stamp each turn of a
taking-part tier with its user's arm (``streams/experiments.py``); ``parley report --experiment NAME``
compares the arms. Start refuses what the gateway could not assign fairly: an unknown override name, shares
that do not add up to 1, a name already running, tiers another running experiment already takes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from parley import errors
from parley.settings import KafkaSettings, from_env

if TYPE_CHECKING:
    from schemas.events import Event, ExperimentArm
    from streams.experiments import Running

app = typer.Typer(help="Controlled experiments: start, stop, list.", no_args_is_help=True)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

READ_TIMEOUT_S = 30.0


def _fail(exc: Exception) -> None:
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


def _running(kafka: KafkaSettings) -> Running:
    from streams.readers import ExperimentReader

    reader = ExperimentReader(kafka)
    try:
        return reader.to_end(READ_TIMEOUT_S)
    finally:
        reader.close()


def _append(kafka: KafkaSettings, event: Event) -> None:
    from parley import schema_registry
    from parley.kafka import EventProducer

    schema_registry.install(kafka)  # a reader older than this CLI still reads what it writes
    producer = EventProducer(kafka)
    try:
        producer.produce_sync(event, timeout=READ_TIMEOUT_S)
    finally:
        producer.close(5)


def describe_arm(arm: ExperimentArm) -> str:
    o = arm.overrides
    sets = [f"{k}={v}" for k, v in (("pool", o.pool), ("medium_score", o.medium_score), ("frontier_score", o.frontier_score)) if v not in ("", None)]
    return f"{arm.name} {arm.share:g}" + (f" ({', '.join(sets)})" if sets else " (control)")


@app.command("start")
def start(
    name: str = typer.Argument(..., help="The experiment's name (`parley report --experiment NAME`)"),
    arm: list[str] = typer.Option(
        ..., "--arm", help="NAME:SHARE[:key=value,...]; overrides: pool, medium_score, frontier_score (e.g. slow:0.5:pool=medium)"
    ),
    tier: list[str] = typer.Option([], "--tier", help="A tier that takes part (repeat; none: every tier)"),
    by: str = typer.Option("", "--by", help="Who starts it (recorded on the event)"),
    note: str = typer.Option("", "--note", help="What it tests, in a few words"),
) -> None:
    """Declare an experiment: from now on each turn of its tiers carries its user's arm."""
    from schemas.events import ExperimentStarted
    from streams.experiments import parse_arm, validate

    kafka = from_env(KafkaSettings)
    try:
        started = ExperimentStarted(experiment=name, arms=[parse_arm(a) for a in arm], tiers=sorted(set(tier)), started_by=by, note=note)
        validate(started)
        running = _running(kafka)
        if name in running.experiments:
            raise errors.ConfigError(f"experiment {name!r} is running; stop it first (`parley experiments stop {name}`)")
        clash = running.overlapping(started)
        if clash:
            raise errors.ConfigError(f"experiment(s) {', '.join(clash)} already take turns of these tiers; stop them or pick other --tier")
        _append(kafka, started)
    except errors.ParleyError as exc:
        _fail(exc)
    out.print(f"started {name}: " + "; ".join(describe_arm(a) for a in started.arms) + f"; tiers {', '.join(started.tiers) or 'all'}")


@app.command("stop")
def stop(
    name: str = typer.Argument(..., help="The running experiment to stop"),
    by: str = typer.Option("", "--by", help="Who stops it (recorded on the event)"),
) -> None:
    """Stop an experiment: turns asked for from now on carry no arm of it."""
    from schemas.events import ExperimentStopped

    kafka = from_env(KafkaSettings)
    try:
        if name not in _running(kafka).experiments:
            raise errors.ConfigError(f"no experiment {name!r} is running (`parley experiments list`)")
        _append(kafka, ExperimentStopped(experiment=name, stopped_by=by))
    except errors.ParleyError as exc:
        _fail(exc)
    out.print(f"stopped {name}")


@app.command("list")
def list_() -> None:
    """The running experiments: arms, shares, overrides, tiers, since when."""
    try:
        running = _running(from_env(KafkaSettings))
    except errors.ParleyError as exc:
        _fail(exc)
    table = Table("experiment", "arms", "tiers", "started", "by")
    for e in sorted(running.experiments.values(), key=lambda e: e.occurred_at):
        since = datetime.fromtimestamp(e.occurred_at / 1e6, timezone.utc).isoformat(timespec="seconds")
        table.add_row(e.experiment, "; ".join(describe_arm(a) for a in e.arms), ", ".join(e.tiers) or "all", since, e.started_by)
    out.print(table if running.experiments else "no experiment running")
