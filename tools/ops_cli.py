"""`parley ops`: lag, groups, topics and drain, as rich tables (docs/operations.md shows real output)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import typer
from rich.console import Console, Group as RichGroup
from rich.live import Live
from rich.table import Table

from infra.local.settings import LocalInfraSettings
from parley.errors import BrokerUnavailable
from parley.ops import Ops, compact, retention, total_lag
from parley.settings import KafkaSettings, from_env
from streams.settings import StreamsSettings
from tools.supervisor import pid_file
from tools.topology import deployment_groups

app = typer.Typer(help="Operate a running Parley: consumer lag, groups, topic drift, draining.", no_args_is_help=True)
# Piped into a file or a doc, rich would wrap at 80 columns and cut topic names.
out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)


def _ops() -> Ops:
    return Ops(from_env(KafkaSettings))


def _fail(exc: Exception) -> None:
    err.print(f"[red]parley ops:[/] {exc}", highlight=False)
    raise typer.Exit(1)


def _groups(ops: Ops, named: list[str] | None) -> list[str]:
    return named or deployment_groups(ops.group_ids(), from_env(StreamsSettings).group_prefix, ops.kafka.topic_prefix)


def lag_table(ops: Ops, groups: list[str], everything: bool = False) -> RichGroup:
    rows = [r for r in ops.lag(groups) if everything or r.committed is not None or r.end > 0]
    table = Table("group", "topic", "partition", "committed", "end", "lag", title="consumer lag")
    for r in rows:
        style = "bold red" if r.lag > 1000 else ("yellow" if r.lag > 0 else None)
        table.add_row(
            r.group, r.topic, str(r.partition), "-" if r.committed is None else str(r.committed), str(r.end), str(r.lag),
            style=style,
        )
    totals = Table("group", "total lag", title="per group")
    for group, lag in sorted(total_lag(rows).items()):
        totals.add_row(group, str(lag))
    return RichGroup(table, totals)


@app.command("lag")
def lag_cmd(
    group: list[str] = typer.Option(None, "--group", "-g", help="Only this group (repeatable)"),
    watch: bool = typer.Option(False, "--watch", "-w", help="Refresh until Ctrl-C"),
    every: float = typer.Option(2.0, "--every", help="Seconds between refreshes with --watch"),
    everything: bool = typer.Option(False, "--all", help="Also partitions that never held a record"),
) -> None:
    """Per group and partition: committed offset, end offset, lag (this deployment's groups by default)."""
    ops = _ops()
    try:
        groups = _groups(ops, group)
        if not watch:
            out.print(lag_table(ops, groups, everything))
            return
        with Live(lag_table(ops, groups, everything), console=out, refresh_per_second=4) as live:
            while True:
                time.sleep(every)
                live.update(lag_table(ops, groups, everything))
    except BrokerUnavailable as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass


@app.command("groups")
def groups_cmd(group: list[str] = typer.Option(None, "--group", "-g", help="Only this group (repeatable)")) -> None:
    """Consumer groups of this deployment: state, members and the partitions each member owns."""
    try:
        ops = _ops()
        groups = ops.groups(_groups(ops, group))
    except BrokerUnavailable as exc:
        _fail(exc)
    table = Table("group", "state", "member", "host", "partitions", title="consumer groups")
    for g in groups:
        if not g.members:
            table.add_row(g.group, g.state, "-", "-", "-")
        for i, m in enumerate(g.members):
            parts = compact(m.partitions) or "-"
            table.add_row(g.group if i == 0 else "", g.state if i == 0 else "", m.client_id, m.host, parts)
    out.print(table)


@app.command("topics")
def topics_cmd() -> None:
    """The topic catalog against the broker: partitions and configs, drift shown (nothing is changed)."""
    from parley.kafka import admin
    from parley.topics import verify_topics
    from schemas.catalog import TOPICS

    kafka = from_env(KafkaSettings)
    try:
        reports = verify_topics(kafka, admin(kafka), fix_configs=False)
    except Exception as exc:  # admin errors surface as KafkaException from futures
        _fail(BrokerUnavailable(f"cannot read topics at {kafka.bootstrap}: {exc}"))
    table = Table("topic", "catalog partitions", "broker partitions", "retention", "drift", title="topics")
    for r in reports:
        spec = TOPICS[r.name]
        table.add_row(
            kafka.topic(r.name), str(spec.partitions), str(r.partitions) if r.partitions else "-", retention(spec.configs),
            "; ".join(r.problems) or "ok", style="red" if r.problems else None,
        )
    out.print(table)
    if any(r.problems for r in reports):
        raise typer.Exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@app.command("drain")
def drain_cmd(
    service: str = typer.Argument(..., help="Service name as `parley run` lists it (gateway, worker-small, router, …)"),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for it to finish and exit"),
    log_dir: Path = typer.Option(None, "--log-dir", help="Where `parley run` keeps logs and pid files"),
) -> None:
    """Drain one service started by `parley run`: SIGTERM, then wait while it finishes its work and exits.

    A gateway turns unready and ends its streams with a resume hint; a worker
    stops taking requests, finishes or hands back what it holds, commits and
    leaves its group, so the other members take its partitions.
    """
    directory = log_dir or from_env(LocalInfraSettings).data_dir / "logs"
    path = pid_file(directory, service)
    if not path.exists():
        _fail(FileNotFoundError(f"no pid file {path}: is `{service}` running under `parley run`?"))
    pid = int(path.read_text().strip())
    if not _alive(pid):
        _fail(ProcessLookupError(f"{service} (pid {pid}) is not running"))
    began = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    out.print(f"{service} (pid {pid}): SIGTERM sent, draining…")
    while _alive(pid) and time.monotonic() - began < timeout:
        time.sleep(0.2)
    if _alive(pid):
        _fail(TimeoutError(f"{service} (pid {pid}) still running after {timeout:.0f}s; see its log in {directory}"))
    out.print(f"{service} drained and exited after {time.monotonic() - began:.1f}s")
