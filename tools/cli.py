"""The ``parley`` command: infrastructure, topics, database and schemas.

Each command builds the settings it needs from the environment, calls one
module that does the work, and renders the outcome; nothing here decides.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import replace
from typing import NoReturn

import typer
from rich.console import Console
from rich.table import Table

from infra.local.settings import LocalInfraSettings
from parley import errors
from parley.settings import CassandraSettings, KafkaSettings, TelemetrySettings, describe, from_env
from tools.analysts.cli import app as analysts_app
from tools.ops_cli import app as ops_app

app = typer.Typer(help="Parley: chat serving, event-sourced on Kafka.", no_args_is_help=True)
infra_app = typer.Typer(help="Run Kafka and Cassandra locally from Maven Central jars (no Docker).")
db_app = typer.Typer(help="The Cassandra schema.")
schemas_app = typer.Typer(help="The Avro schemas of the events.")
app.add_typer(infra_app, name="infra")
app.add_typer(db_app, name="db")
app.add_typer(schemas_app, name="schemas")
from tools.users_cli import orgs_app, users_app  # noqa: E402

app.add_typer(users_app, name="users")
app.add_typer(orgs_app, name="orgs")
from tools.keys_cli import app as keys_app  # noqa: E402

app.add_typer(keys_app, name="keys")
from tools.accounts_cli import app as accounts_app  # noqa: E402

app.add_typer(accounts_app, name="accounts")
app.add_typer(analysts_app)  # no name: replay, report, counterfactual, archive, rebuild are top-level commands
from tools.audit_cli import audit_app  # noqa: E402  (its module holds the rendering)

app.add_typer(audit_app, name="audit")
app.add_typer(ops_app, name="ops")
from tools.fleet_cli import app as fleet_app  # noqa: E402

app.add_typer(fleet_app, name="fleet")
from tools.tools_cli import app as tools_app  # noqa: E402

app.add_typer(tools_app, name="tools")
from tools.experiments_cli import app as experiments_app  # noqa: E402

app.add_typer(experiments_app, name="experiments")
from tools.capacity_cli import capacity  # noqa: E402

app.command("capacity")(capacity)

out = Console()
err = Console(stderr=True, soft_wrap=True)


def _fail(exc: Exception) -> NoReturn:
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


# ---------------------------------------------------------------- infra


_REPLICAS = typer.Option(
    None,
    "--replicas",
    help="1: one broker and one Cassandra node on 127.0.0.1; 3: a replicated cluster on 127.0.0.2-127.0.0.4 "
    "(default: PARLEY_INFRA_REPLICAS)",
)


def _infra_settings(replicas: int | None) -> LocalInfraSettings:
    try:
        cfg = from_env(LocalInfraSettings)
        return cfg if replicas is None else replace(cfg, replicas=replicas)
    except errors.ConfigError as exc:
        _fail(exc)


@infra_app.command("up")
def infra_up(replicas: int | None = _REPLICAS) -> None:
    """Start (or reuse) Kafka and Cassandra and wait until every node is healthy."""
    from infra.local import jvm, secure, stack

    cfg = _infra_settings(replicas)
    try:
        states = stack.up(cfg, echo=lambda s: err.print(s, highlight=False))
    except jvm.InfraError as exc:
        _fail(exc)
    table = Table("service", "address", "pid", "state", "healthy after", "RSS")
    for s in states:
        table.add_row(
            s.name,
            s.address,
            str(s.pid),
            "reused" if s.reused else "started",
            f"{s.seconds_to_healthy:.1f}s" if s.seconds_to_healthy is not None else "-",
            f"{s.rss_mib:.0f} MiB" if s.rss_mib else "-",
        )
    out.print(table)
    if cfg.replicated:
        out.print("Clients reach this cluster with:")
        for name, value in secure.client_env(cfg).items():
            out.print(f"  export {name}=\"{value}\"", highlight=False, soft_wrap=True)


@infra_app.command("down")
def infra_down() -> None:
    """Stop the Kafka and Cassandra processes Parley started (by pid file), a replicated cluster's too."""
    from infra.local import stack

    stack.down(from_env(LocalInfraSettings), echo=out.print)


@infra_app.command("status")
def infra_status(replicas: int | None = _REPLICAS) -> None:
    """Show whether the local services run, and their memory."""
    from infra.local import stack

    table = Table("service", "address", "pid", "RSS", "log")
    for s in stack.status(_infra_settings(replicas)):
        table.add_row(s.name, s.address, str(s.pid or "not running"), f"{s.rss_mib:.0f} MiB" if s.rss_mib else "-", str(s.log))
    out.print(table)


def _settings_by_service() -> list[tuple[str, type]]:
    """Every typed settings object, under the service that reads it (imported here: the services are below)."""
    from documents.settings import DocumentSettings
    from edge.settings import EdgeSettings
    from gateway.settings import GatewaySettings, OidcSettings, QuotaSettings, SessionSettings
    from moderation.settings import ModerationSettings
    from parley.keys import KeySettings
    from parley.tool_registry import ToolSettings
    from streams.settings import (
        ContextSettings,
        MaterializerSettings,
        RouterSettings,
        StreamsSettings,
        TitlerSettings,
        UsageSettings,
    )
    from workers.engine.settings import EngineSettings
    from workers.settings import TemplateSettings, WorkerSettings

    return [
        ("every service: Kafka", KafkaSettings),
        ("every service: Cassandra", CassandraSettings),
        ("every service: logs and metrics", TelemetrySettings),
        ("every service: encryption of content (data keys, KMS)", KeySettings),
        ("local infrastructure (parley infra)", LocalInfraSettings),
        ("engine (CPU)", EngineSettings),
        ("worker", WorkerSettings),
        ("workers, titler, context builder: each pool's chat template", TemplateSettings),
        ("stream processors", StreamsSettings),
        ("context builder", ContextSettings),
        ("router", RouterSettings),
        ("materializer", MaterializerSettings),
        ("gateway, tool broker, tool executor: Parley's tools", ToolSettings),
        ("usage", UsageSettings),
        ("titler", TitlerSettings),
        ("moderation (processor, strict context builder, POST /v1/moderations)", ModerationSettings),
        ("documents (gateway uploads, document worker, context builder search)", DocumentSettings),
        ("gateway", GatewaySettings),
        ("gateway: quotas", QuotaSettings),
        ("gateway: web sessions, sign-in limits, response headers", SessionSettings),
        ("gateway: sign-in with an OpenID provider", OidcSettings),
        ("edge (in front of sharded gateways)", EdgeSettings),
    ]


def _settings_table(groups: list[tuple[str, type]]) -> Table:
    table = Table("variable", "default", "meaning")
    for title, cls in groups:
        table.add_section()
        table.add_row(f"[bold]{title}[/bold]", "", "")
        for name, default, doc in describe(cls):
            table.add_row(name, str(default), doc)
    return table


@app.command("settings")
def settings_cmd() -> None:
    """List every setting of every service: its environment variable, default and meaning."""
    out.print(_settings_table(_settings_by_service()))


@infra_app.command("settings")
def infra_settings() -> None:
    """List the settings of Kafka, Cassandra and the local infrastructure (all of them: `parley settings`)."""
    out.print(_settings_table([g for g in _settings_by_service() if g[1] in (KafkaSettings, CassandraSettings, LocalInfraSettings)]))


# ---------------------------------------------------------------- topics


@app.command("topics")
def topics(check: bool = typer.Option(False, "--check", help="Only verify; change nothing.")) -> None:
    """Create the catalog's topics and verify partitions and configs on the broker."""
    from parley.kafka import admin
    from parley.topics import ensure_topics, verify_topics

    settings = from_env(KafkaSettings)
    try:
        client = admin(settings)
        reports = verify_topics(settings, client, fix_configs=False) if check else ensure_topics(settings, client)
    except errors.Unavailable as exc:
        _fail(exc)
    table = Table("topic", "partitions", "state")
    for r in reports:
        if r.problems:
            state = "[red]" + "; ".join(r.problems) + "[/]"
        elif r.created:
            state = "[green]created[/]"
        elif r.config_fixed:
            state = "[yellow]configs set: " + ", ".join(r.config_fixed) + "[/]"
        else:
            state = "ok"
        table.add_row(settings.topic(r.name), str(r.partitions), state)
    out.print(table)
    if any(r.problems for r in reports):
        raise typer.Exit(1)


# ---------------------------------------------------------------- db


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending CQL migrations from schemas/cql (idempotent, versioned)."""
    from parley.cassandra import connect
    from parley.migrate import migrate

    settings = from_env(CassandraSettings)
    try:
        session = connect(settings)
        try:
            applied = migrate(session, settings.keyspace, settings.replication)
        finally:
            session.cluster.shutdown()
    except (errors.Unavailable, errors.MigrationError) as exc:
        _fail(exc)
    if applied:
        for m in applied:
            out.print(f"applied {m.version:04d}_{m.name} ({len(m.statements)} statements) to {settings.keyspace}")
    else:
        out.print(f"{settings.keyspace}: schema up to date")


# ---------------------------------------------------------------- schemas


@schemas_app.command("write")
def schemas_write() -> None:
    """Regenerate schemas/avro/*.avsc from schemas/events.py, keeping old versions in released/."""
    from schemas import avsc

    changed = avsc.write()
    out.print("changed: " + ", ".join(changed) if changed else "all .avsc files up to date")


@schemas_app.command("check")
def schemas_check() -> None:
    """Fail if an .avsc file differs from its event type."""
    from schemas import avsc

    drifted = avsc.drift()
    if drifted:
        err.print("out of date: " + ", ".join(drifted) + " (run `parley schemas write`)")
        raise typer.Exit(1)
    out.print("all .avsc files match schemas/events.py")


# ---------------------------------------------------------------- services


PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _exec_module(module: str, args: list[str]) -> None:
    """Become ``python -m module args``: each service parses its own flags, in one place."""
    os.execv(sys.executable, [sys.executable, "-m", module, *args])


@app.command("gateway", context_settings=PASS_THROUGH)
def gateway_cmd(ctx: typer.Context) -> None:
    """Serve the HTTP gateway (PARLEY_GATEWAY_HOST/PORT)."""
    _exec_module("gateway", ctx.args)


@app.command("edge", context_settings=PASS_THROUGH)
def edge_cmd(ctx: typer.Context) -> None:
    """HAProxy in front of sharded gateways, routing by conversation (PARLEY_EDGE_PORT, PARLEY_EDGE_GATEWAYS in shard
    order); `--config` prints its configuration."""
    _exec_module("edge", ctx.args)


@app.command("engine", context_settings=PASS_THROUGH)
def engine_cmd(ctx: typer.Context) -> None:
    """Serve the CPU engine, which speaks SGLang's HTTP API (`parley engine --help`)."""
    _exec_module("workers.engine", ctx.args)


@app.command("worker", context_settings=PASS_THROUGH)
def worker_cmd(ctx: typer.Context) -> None:
    """Run an inference worker: `parley worker --pool small` (`parley worker --help`)."""
    _exec_module("workers", ctx.args)


@app.command("documents", context_settings=PASS_THROUGH)
def documents_cmd(ctx: typer.Context) -> None:
    """Run a document worker: checks, extracts (OCR), indexes uploads (group `documents`; PARLEY_DOCUMENTS_*)."""
    _exec_module("documents", ctx.args)


@app.command("streams", context_settings=PASS_THROUGH)
def streams_cmd(ctx: typer.Context) -> None:
    """Run a stream processor: `parley streams context|router|materializer|usage|titler|search|moderation|erasure|tools` (streams/processors.py)."""
    _exec_module("streams", ctx.args)


@app.command("run")
def run_cmd() -> None:
    """Start every service of the topology (engine, worker, processors, gateway); Ctrl-C stops them."""
    from infra.local.settings import LocalInfraSettings
    from tools.supervisor import StartFailed, Supervisor
    from tools.topology import SERVICES

    infra = from_env(LocalInfraSettings)
    ports = {
        "engine_port": int(os.environ.get("PARLEY_ENGINE_PORT", "30000")),
        "gateway_port": int(os.environ.get("PARLEY_GATEWAY_PORT", "8000")),
    }
    supervisor = Supervisor(infra.data_dir / "logs", ports=ports)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        supervisor.start_all(SERVICES, echo=lambda s: err.print(s, highlight=False))
    except StartFailed as exc:
        supervisor.stop_all()
        _fail(exc)
    table = Table("service", "pid", "reads", "writes", "log")
    for child in supervisor.children:
        svc = child.service
        table.add_row(svc.name, str(child.process.pid), ", ".join(svc.consumes), ", ".join(svc.produces), str(child.log))
    out.print(table)
    out.print(f"Parley is up: [bold]http://127.0.0.1:{ports['gateway_port']}/[/]  (Ctrl-C stops the services; `make stop` stops Kafka and Cassandra)")
    while not stopping:
        for child in [c for c in supervisor.children if c.process.poll() == 0]:
            # Exit 0 is a finished drain (`parley ops drain`): the rest keeps serving.
            err.print(f"{child.service.name} (pid {child.process.pid}) drained and exited; the others keep serving")
            supervisor.children.remove(child)
        dead = [c for c in supervisor.children if c.process.poll() is not None]
        if dead:
            err.print(f"[red]{dead[0].service.name} exited with {dead[0].process.returncode}; stopping everything[/]")
            supervisor.stop_all()
            raise typer.Exit(1)
        time.sleep(0.5)
    err.print("stopping services…")
    supervisor.stop_all()


@app.command("chat")
def chat_cmd(
    message: str = typer.Argument(None, help="Send one message and exit; omit for an interactive chat."),
    url: str = typer.Option("http://127.0.0.1:8000", envvar="PARLEY_URL", help="Gateway URL"),
    key: str = typer.Option(None, envvar="PARLEY_API_KEY", help="API key (default: the demo user's)"),
    conversation: str = typer.Option(None, "--conversation", "-c", help="Continue this conversation"),
) -> None:
    """A terminal client: streams replies token by token."""
    from tools.chat import chat

    if key is None:
        from infra.local.settings import LocalInfraSettings

        path = from_env(LocalInfraSettings).data_dir / "demo.key"
        if not path.exists():
            _fail(ValueError("no API key: pass --key or PARLEY_API_KEY (or run `parley users demo`)"))
        key = path.read_text().strip()
    asyncio.run(chat(url, key, conversation, message))


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())
