"""``parley users …`` and ``parley orgs …``: organisations, users and API keys (DESIGN.md §12).

Each command opens a Cassandra session, runs one function of ``parley/users.py``
and prints the outcome; a new key is printed alone on the last line, once.
Keys made here hold the ``chat`` scope, as every key does; ``erase`` requests an
erasure as the gateway does (gateway/erasure.py) from the operator's seat, and
``erasure`` shows how far the job got.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from parley import errors
from parley.settings import CassandraSettings, from_env

users_app = typer.Typer(help="Users and API keys.", no_args_is_help=True)
orgs_app = typer.Typer(help="Organisations.", no_args_is_help=True)
err = Console(stderr=True, soft_wrap=True)


def _fail(exc: Exception) -> None:
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


@contextmanager
def _session() -> Iterator[Any]:
    from parley.cassandra import connect

    settings = from_env(CassandraSettings)
    try:
        session = connect(settings, settings.keyspace)
    except errors.Unavailable as exc:
        _fail(exc)
    try:
        yield session
    finally:
        session.cluster.shutdown()


def _run(call: Callable[[Any], Any]) -> Any:
    with _session() as session:
        try:
            return call(session)
        except ValueError as exc:
            _fail(exc)


@users_app.command("create")
def users_create(
    name: str,
    tier: str = typer.Option("free", "--tier", help="free | plus | enterprise"),
    org: str = typer.Option("", "--org", help="Organisation to join (default: a personal one, which the user administers)"),
    role: str = typer.Option("member", "--role", help="member | admin (of --org)"),
) -> None:
    """Create a user and print a new API key (alone on the last line; shown only once)."""
    from parley.users import create_user

    user_id, key = _run(lambda s: create_user(s, name, tier, org_id=org or None, role=role))
    err.print(f"created user {user_id} ({name}, tier {tier}); the key is shown once:")
    print(key)


@users_app.command("key")
def users_key(user_id: str, label: str = typer.Option("default", "--label")) -> None:
    """Give a user a new API key (to rotate: make a new one, move to it, revoke the old)."""
    from parley.users import create_key

    key_id, key = _run(lambda s: create_key(s, user_id, label))
    err.print(f"new key {key_id} for {user_id}; it is shown once:")
    print(key)


@users_app.command("revoke")
def users_revoke(user_id: str, key_id: str) -> None:
    """Revoke one of a user's keys: it stops working within PARLEY_GATEWAY_AUTH_CACHE_S."""
    from parley.users import revoke

    _run(lambda s: revoke(s, user_id, key_id))
    err.print(f"revoked {key_id}")


@users_app.command("erase")
def users_erase(
    user_id: str,
    confirm: bool = typer.Option(False, "--confirm", help="Required: erasure destroys the user's content for good"),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for the job to finish (exit 1 if it has not)"),
) -> None:
    """Erase a user, as DELETE /v1/me does: the user is refused at once (marked erased, keys revoked, sign-in
    and sessions ended) and the erasure processor deletes every conversation, document and memory, destroys
    the data key and purges the rows. Asking again for an erased user repeats the job, harmlessly."""
    import asyncio

    from gateway.erasure import request_by_operator
    from gateway.errors import ApiError
    from parley.settings import KafkaSettings

    if not confirm:
        _fail(ValueError("erasure destroys every conversation, document and memory of the user for good; add --confirm"))
    try:
        asked = asyncio.run(request_by_operator(from_env(KafkaSettings), from_env(CassandraSettings), user_id))
    except (ValueError, errors.Unavailable, ApiError) as exc:  # ApiError: Kafka did not take the request (503)
        _fail(exc)
    err.print(f"erasure of {user_id} requested ({asked['erasure']['request_id']})")
    _show_erasure(user_id, wait)


@users_app.command("erasure")
def users_erasure(
    user_id: str,
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for the job to finish (exit 1 if it has not)"),
) -> None:
    """How far the user's newest erasure got: requested, deletes appended, key destroyed, rows purged, done."""
    _show_erasure(user_id, wait)


def _show_erasure(user_id: str, wait_s: float) -> None:
    """The newest erasure's steps; exit 1 when there is none, or it is not done after ``wait_s`` seconds."""
    import asyncio
    import time

    from gateway.erasure import status_by_operator
    from rich.table import Table

    deadline = time.monotonic() + wait_s
    while True:
        try:
            found = asyncio.run(status_by_operator(from_env(CassandraSettings), user_id))["erasure"]
        except errors.Unavailable as exc:
            _fail(exc)
        if found is None:
            _fail(ValueError(f"no erasure was asked for {user_id}"))
        if found["status"] == "done" or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    table = Table("step", "ended", title=f"erasure of {user_id} ({found['by']}): {found['status']}")
    for step, at in found["steps"].items():
        table.add_row(step, at or "")
    err.print(table)
    if found["conversations"] is not None:
        err.print(f"{found['conversations']} conversations, {found['documents']} documents deleted")
    if wait_s and found["status"] != "done":
        _fail(TimeoutError(f"not done after {wait_s:g}s: is the erasure processor running (`parley streams erasure`)?"))


DEMO_EMAIL = "demo@parley.local"


@users_app.command("demo")
def users_demo(
    account: bool = typer.Option(False, "--account", help="Print the web page's sign-in (email and password) instead"),
) -> None:
    """Ensure the demo user exists and print its API key (kept in .data/demo.key), or with --account its
    sign-in for the web page (the password kept in .data/demo.password, 0600)."""
    import secrets

    from infra.local.settings import LocalInfraSettings
    from parley.accounts import create_account, verify
    from parley.users import create_user, hash_key

    data = from_env(LocalInfraSettings).data_dir
    key_path, password_path = data / "demo.key", data / "demo.password"
    with _session() as session:
        user_id = None
        if key_path.exists():
            key = key_path.read_text().strip()
            row = session.execute("SELECT user_id, revoked FROM api_keys WHERE key_hash = %s", (hash_key(key),)).one()
            if row is not None and not row.revoked:
                user_id = row.user_id
        if user_id is None:
            user_id, key = create_user(session, "demo", "plus")
            _secret(key_path, key)
        if account:
            password = password_path.read_text().strip() if password_path.exists() else ""
            if not password or verify(session, DEMO_EMAIL, password) != user_id:
                password = secrets.token_urlsafe(12)
                session.execute("DELETE FROM accounts_by_email WHERE email = %s", (DEMO_EMAIL,))  # a former demo user's
                session.execute("DELETE FROM accounts_by_user WHERE user_id = %s", (user_id,))
                create_account(session, user_id, DEMO_EMAIL, password)
                _secret(password_path, password)
            print(f"{DEMO_EMAIL} {password}")
        else:
            print(key)


def _secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    path.chmod(0o600)


@orgs_app.command("create")
def orgs_create(name: str) -> None:
    """Create a team organisation and print its id; add its first admin with
    `parley users create NAME --org ORG_ID --role admin`."""
    from parley.users import create_org

    print(_run(lambda s: create_org(s, name)))
