"""``parley audit``: the audit's report as a table; exit 1 on any difference.
``parley audit erasure``: proof that an erased user, or a canary text, is gone (tools/erasure_audit.py)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from parley import errors
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools.audit import Report

out = Console()
err = Console(stderr=True, soft_wrap=True)


def render(report: Report, undecodable: int = 0, show: int = 10) -> Table:
    """Counts, and the first ``show`` differences of each kind."""
    t = report.turns
    table = Table("check", "count", title="chat.events ⇄ Cassandra")
    ok, bad = "[green]{}[/]", "[bold red]{}[/]"

    def row(name: str, n: int, problem: bool = False) -> None:
        table.add_row(name, (bad if problem and n else ok if problem else "{}").format(n))

    row("conversations", report.conversations)
    row("events read", report.events)
    row("undecodable records", undecodable)
    row("rows expected (log projection)", report.rows_expected)
    row("rows found (Cassandra)", report.rows_found)
    row("rows missing", len(report.missing), True)
    row("rows extra", len(report.extra), True)
    row("rows with differing columns", len({d.key for d in report.differing}), True)
    row("turns requested", t.requested)
    for reason, n in sorted(t.finished.items()):
        row(f"turns ended: {reason}", n)
    row("turns in flight (no completion yet)", len(t.in_flight))
    row("completions re-appended (same outcome)", t.reappended)
    row("client actions answered twice", len(t.duplicate_replies), True)
    row("requests with conflicting completions", len(t.conflicting_completions), True)
    row("replies with repeated text", len(t.repeated_text), True)
    row("completions never requested", len(t.unrequested), True)
    for key in report.missing[:show]:
        table.add_row(f"[red]missing[/] {key[0]} {key[1]}", "")
    for key in report.extra[:show]:
        table.add_row(f"[red]extra[/] {key[0]} {key[1]}", "")
    for d in report.differing[:show]:
        # Column names only: values may be message text, which is never printed.
        table.add_row(f"[red]differs[/] {d.key[0]} {d.key[1]} .{d.column}", "")
    return table


audit_app = typer.Typer(invoke_without_command=True, help="Check the projections, or an erasure.")


@audit_app.callback()
def audit_cmd(
    ctx: typer.Context,
    wait: float = typer.Option(0.0, "--wait", help="Re-read for up to this many seconds until rows agree and no turn is in flight"),
    strict: bool = typer.Option(False, "--strict", help="Also fail when a turn is still in flight (after quiescence: lost)"),
    show: int = typer.Option(10, "--show", help="Differences listed of each kind"),
) -> None:
    """Compare Cassandra with the projection of chat.events, and check every turn ended once."""
    if ctx.invoked_subcommand is not None:
        return
    from parley import keys
    from tools.audit_sources import run_audit

    try:
        keys.install_from_env()  # the projection's sealed cells are compared as written
        report, undecodable = run_audit(from_env(KafkaSettings), from_env(CassandraSettings), wait)
    except errors.Unavailable as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1)
    out.print(render(report, undecodable, show))
    if not report.ok(lost_ok=not strict):
        raise typer.Exit(1)


@audit_app.command("erasure")
def erasure_cmd(
    user: str = typer.Argument(None, help="An erased user's id: key destroyed, rows gone, no readable event left"),
    canary: list[str] = typer.Option([], "--canary", help="A text that must be on disk nowhere (repeatable)"),
) -> None:
    """Prove an erasure: exit 1 if the user's data or a canary text is found in any store.

    Cassandra's memtables are flushed first, so its SSTables hold what it was told."""
    from infra.local.nodetool import flush
    from infra.local.settings import LocalInfraSettings
    from parley import keys
    from parley.cassandra import connect
    from tools import erasure_audit

    if not user and not canary:
        err.print("[bold red]error:[/] name a USER or at least one --canary")
        raise typer.Exit(2)
    cassandra, infra = from_env(CassandraSettings), from_env(LocalInfraSettings)
    problems: list[erasure_audit.Problem] = []
    try:
        session = connect(cassandra)
        try:
            service = keys.install_from_env(session)
            if user:
                job = erasure_audit.erasure_job(session, cassandra.keyspace, user)
                if job is not None:
                    ended = ", ".join(f"{step} {at or '-'}" for step, at in job.public()["steps"].items())
                    err.print(f"erasure job {job.request_id} ({job.by}): {job.status} [{ended}]")
                problems += erasure_audit.audit_user(from_env(KafkaSettings), session, cassandra.keyspace, service.keyspace, user)
        finally:
            session.cluster.shutdown()
        scanned: dict[str, int] = {}
        if canary:
            flush(infra)  # memtables to SSTables, so the scan reads what Cassandra was told
            found, scanned = erasure_audit.scan_canaries(infra.data_dir, canary)
            problems += found
    except errors.Unavailable as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1)
    table = Table("where", "what", title="erasure audit")
    for p in problems:
        table.add_row(p.where, f"[bold red]{p.what}[/]")
    out.print(table if problems else "[green]nothing found[/]" + (f" (files read: {scanned})" if scanned else ""))
    if problems:
        raise typer.Exit(1)
