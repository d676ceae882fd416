"""`parley replay | report | counterfactual | archive | rebuild`: the analysts' commands.

Each command parses its options, calls one module, and renders the outcome. Heavy
imports (pyarrow, matplotlib, faust via the router) happen inside the command that needs
them, so `parley --help` stays quick.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from parley import errors
from parley.settings import CassandraSettings, KafkaSettings, from_env

app = typer.Typer(help="Analysts: replay the log, report, counterfactual routing, the cold tier.")
out = Console()
err = Console(stderr=True, soft_wrap=True)

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str | None, now_ms: int | None = None) -> int | None:
    """ISO 8601 (UTC unless it says), epoch milliseconds, or an age like 30m / 2h / 7d (that long ago)."""
    if text is None:
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    if text.isdigit():
        return int(text)
    m = _AGO.match(text)
    if m:
        return now_ms - int(float(m[1]) * _UNIT_S[m[2]] * 1000)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: use ISO 8601 (2025-01-31T12:00:00Z), epoch ms, or an age (30m, 2h, 7d)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _fail(exc: Exception) -> None:
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


@contextmanager
def _progress(what: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """(on_plan, on_batch) callbacks driving a rich progress bar on stderr."""
    bar = Progress(
        TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn("records"), TimeElapsedColumn(),
        console=err, transient=True,
    )
    task = bar.add_task(what, total=None)
    with bar:
        yield (lambda total: bar.update(task, total=total)), (lambda n: bar.advance(task, n))


def _location(url: str | None):  # type: ignore[no-untyped-def]
    from tools.analysts.location import Location

    return Location(url) if url else None


def _install_keys() -> None:
    """The key service, to open sealed content (an erased user's reads "[erased]")."""
    from parley import keys

    try:
        keys.install_from_env()
    except errors.Unavailable as exc:
        _fail(exc)


ARCHIVE_OPT = typer.Option(None, "--archive", envvar="PARLEY_ARCHIVE_URL", help="Cold tier to read first: a directory or fsspec URL")


@app.command("replay")
def replay_cmd(
    output: Path = typer.Argument(..., help="Output file: .jsonl, or .parquet"),
    since: str = typer.Option(None, "--since", help="From (ISO 8601, epoch ms, or an age such as 2h)"),
    until: str = typer.Option(None, "--until", help="Until, exclusive (same forms); default: now"),
    conversation: str = typer.Option(None, "--conversation", help="Only this conversation"),
    user: str = typer.Option(None, "--user", help="Only this user"),
    org: str = typer.Option(None, "--org", help="Only this organisation's turns"),
    lead_s: float = typer.Option(60.0, "--lead", help="Seconds read before --since (user messages precede requests)"),
    grace_s: float = typer.Option(600.0, "--grace", help="Seconds read after --until (completions follow requests)"),
    archive: str = ARCHIVE_OPT,
    stats: Path = typer.Option(None, "--stats", help="Also write what was read from where (JSON)"),
    plain: bool = typer.Option(
        False, "--plain", help="Write the texts in the clear (for another tool): no erasure reaches the file, delete it yourself"
    ),
) -> None:
    """Reconstruct every turn of a time range from the log (and the archive), without joining any consumer group.
    The file's texts are sealed under each turn's user (they read [erased] once the user is erased) unless --plain."""
    from schemas import sealing
    from tools.analysts import replay

    _install_keys()
    query = replay.Query(parse_time(since), parse_time(until), conversation, user, org, lead_s, grace_s)
    try:
        with _progress("replay") as (on_plan, on_batch):
            result = replay.replay(from_env(KafkaSettings), query, location=_location(archive), on_batch=on_batch, on_plan=on_plan)
        replay.write([t.to_record() for t in result.turns], output, sealing.UNSEALED if plain else None)
    except errors.ParleyError as exc:
        _fail(exc)
    if stats is not None:
        stats.write_text(json.dumps({"read_window_ms": result.read_window_ms, "partitions": result.stats.to_record()}, indent=1))
    err.print(
        f"{len(result.turns)} turns → {output}  ({result.stats.records} records read, {result.decoded} decoded, "
        f"{result.skipped} skipped undecoded, {result.undecodable} undecodable)"
    )
    if plain:
        err.print(f"[yellow]{output} holds its users' text in the clear: delete it when one of them is erased[/]")


@app.command("report")
def report_cmd(
    replay_file: Path = typer.Argument(..., help="A file `parley replay` wrote"),
    out_dir: Path = typer.Option(Path("report"), "--out", help="Folder for report.md, report.json and the charts"),
    prices: Path = typer.Option(None, "--prices", help="TOML price table, USD per million tokens by pool or model"),
    experiment: str = typer.Option(None, "--experiment", help="Compare this experiment's arms instead (experiment.md, .json)"),
    baseline: str = typer.Option(None, "--baseline", help="With --experiment: the arm the others are compared with (default control)"),
) -> None:
    """TTFT percentiles, speed, routing mix, downgrade/shed rates and cost, as Markdown and PNG charts; with
    --experiment, its arms compared on TTFT, tokens, cost, feedback and regenerate rate with 95% intervals."""
    from tools.analysts import charts, replay, report

    if experiment is not None:
        _experiment_report(replay_file, out_dir, prices, experiment, baseline)
        return
    try:
        table = report.load_prices(prices)
        r = report.compute(replay.load(replay_file, texts=False), table)  # figures only: no text is opened
    except errors.ParleyError as exc:
        _fail(exc)
    drawn = charts.draw(r, out_dir)
    (out_dir / "report.md").write_text(report.markdown(r, replay_file.name, drawn, table))
    (out_dir / "report.json").write_text(json.dumps({**r.to_record(), "charts": charts.series(r)}, indent=1))
    err.print(f"{r.turns} turns → {out_dir / 'report.md'}, report.json, " + ", ".join(drawn))


def _experiment_report(replay_file: Path, out_dir: Path, prices: Path | None, name: str, baseline: str | None) -> None:
    from tools.analysts import experiment, replay, report

    try:
        r = experiment.compare(replay.load(replay_file, texts=False), name, report.load_prices(prices), baseline)
    except (errors.ParleyError, ValueError) as exc:
        _fail(exc)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = experiment.markdown(r)
    (out_dir / "experiment.md").write_text(text)
    (out_dir / "experiment.json").write_text(json.dumps(r.to_record(), indent=1))
    print(text, end="")  # plain: Markdown must not be re-wrapped
    err.print(f"{sum(r.arms.values())} turns of {name} → {out_dir / 'experiment.md'}, experiment.json")


@app.command("counterfactual")
def counterfactual_cmd(
    replay_file: Path = typer.Argument(..., help="A file `parley replay` wrote"),
    set_: list[str] = typer.Option([], "--set", help="Router setting override, key=value (e.g. medium_score=1.5)"),
    config: Path = typer.Option(None, "--config", help="TOML file of router setting overrides"),
    prices: Path = typer.Option(None, "--prices", help="TOML price table (see `parley report`)"),
    json_out: Path = typer.Option(None, "--json", help="Also write the comparison as JSON"),
    sweep: str = typer.Option(None, "--sweep", help="key=v1,v2,…: one setting's candidate values, each with the feedback of the turns it sends where"),
) -> None:
    """Re-run the router's pool policy with other settings over the logged requests; compare mix, escalations, cost
    and the feedback of the turns each configuration sends to each pool."""
    from dataclasses import asdict

    from tools.analysts import counterfactual, replay, report

    _install_keys()  # the prompts are routed again: their texts are opened
    if sweep is not None:
        key, sep, values = sweep.partition("=")
        try:
            if not sep or not values.strip():
                raise errors.ConfigError(f"--sweep {sweep!r}: write key=v1,v2,… (e.g. medium_score=1.0,1.5,2.0)")
            rows = counterfactual.sweep(replay.load(replay_file), key.strip(), [v.strip() for v in values.split(",")], report.load_prices(prices))
        except errors.ParleyError as exc:
            _fail(exc)
        print(counterfactual.sweep_markdown(key.strip(), rows), end="")
        if json_out is not None:
            json_out.write_text(json.dumps([asdict(r) for r in rows], indent=1))
        return
    try:
        overrides = counterfactual.parse_overrides(set_, config)
        baseline = counterfactual.settings_with({})
        other = counterfactual.settings_with(overrides)
        comparison = counterfactual.compare(replay.load(replay_file), baseline, other, report.load_prices(prices), overrides)
    except errors.ParleyError as exc:
        _fail(exc)
    print(counterfactual.markdown(comparison), end="")  # plain: Markdown must not be re-wrapped
    if json_out is not None:
        json_out.write_text(json.dumps(comparison.to_record(), indent=1))


@app.command("archive")
def archive_cmd(
    location: str = typer.Argument(..., envvar="PARLEY_ARCHIVE_URL", help="Directory or fsspec URL (s3://bucket/parley)"),
    before: str = typer.Option(..., "--before", help="Cut-off: records older than this (ISO 8601, epoch ms, or an age such as 7d)"),
    topic: list[str] = typer.Option([], "--topic", help="Catalog topic to archive (repeatable); default: what replay and rebuild read"),
) -> None:
    """Copy records older than a cut-off into Avro files per topic and day (idempotent, incremental)."""
    from tools.analysts import archive

    cutoff = parse_time(before)
    assert cutoff is not None
    try:
        with _progress("archive") as (_, on_batch):
            report = archive.archive(
                from_env(KafkaSettings), archive.Location(location), cutoff, tuple(topic) or archive.DEFAULT_TOPICS, on_batch
            )
    except errors.ParleyError as exc:
        _fail(exc)
    table = Table("topic", "records copied")
    for name, n in report.records.items():
        table.add_row(name, str(n))
    out.print(table)
    err.print(f"{len(report.files)} files written under {location} (cut-off {datetime.fromtimestamp(cutoff / 1000, timezone.utc).isoformat()})")


@app.command("rebuild")
def rebuild_cmd(
    keyspace: str = typer.Option(..., "--keyspace", help="Empty keyspace to build (created and migrated)"),
    archive: str = ARCHIVE_OPT,
    compare: str = typer.Option(None, "--compare", help="Then compare its projected tables with this keyspace's, row by row"),
) -> None:
    """Recreate the Cassandra projections from the archive + the log into an empty keyspace."""
    from tools.analysts import digest, rebuild

    _install_keys()
    cassandra = replace(from_env(CassandraSettings), keyspace=keyspace)
    try:
        with _progress("rebuild") as (on_plan, on_batch):
            report = rebuild.rebuild(from_env(KafkaSettings), cassandra, _location(archive), on_batch, on_plan)
    except errors.ParleyError as exc:
        _fail(exc)
    err.print(
        f"{report.events} events → {report.writes} writes into {keyspace} in {report.seconds:.1f} s "
        f"({report.events_per_s:,.0f} events/s; {report.invalid} skipped)"
    )
    if compare:
        from parley.cassandra import connect

        session = connect(cassandra)
        try:
            a, b = digest.keyspace_digest(session, keyspace), digest.keyspace_digest(session, compare)
        finally:
            session.cluster.shutdown()
        table = Table("table", f"rows in {keyspace}", f"rows in {compare}", "same")
        for name in digest.PROJECTED:
            table.add_row(name, str(a[name].rows), str(b[name].rows), "yes" if a[name] == b[name] else "[red]NO[/]")
        out.print(table)
        if any(a[name] != b[name] for name in digest.PROJECTED):
            raise typer.Exit(1)
