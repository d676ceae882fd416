"""``parley accounts``: password accounts for the web page (parley/accounts.py, docs/web-sign-in.md).

The password is never an argument (it would sit in the shell's history and in every process listing):
a hidden prompt asks for it twice, or ``--password-stdin`` reads one line from standard input.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from parley import errors
from parley.settings import CassandraSettings, from_env

app = typer.Typer(help="Password accounts for the web page's sign-in.", no_args_is_help=True)
err = Console(stderr=True, soft_wrap=True)


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    return str(typer.prompt("Password", hide_input=True, confirmation_prompt=True))


@app.command("create")
def accounts_create(
    user_id: str,
    email: str,
    password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from standard input"),
) -> None:
    """Give USER_ID a password account, signed in to with EMAIL."""
    from parley.accounts import create_account
    from parley.cassandra import connect

    password = _password(password_stdin)
    settings = from_env(CassandraSettings)
    try:
        session = connect(settings, settings.keyspace)
    except errors.Unavailable as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    try:
        stored = create_account(session, user_id, email, password)
    except (ValueError, errors.Unavailable) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        session.cluster.shutdown()
    err.print(f"user {user_id} signs in to the web page as {stored}")
