"""Password accounts on real Cassandra: unique case-folded emails, argon2id hashes, equal-cost failures,
erasure with the user's sessions, and `parley accounts create`."""

from __future__ import annotations

import statistics
import time

import pytest
import typer
from typer.testing import CliRunner

from parley import accounts
from parley.users import create_user
from tools.accounts_cli import app as accounts_app

PASSWORD = "correct horse battery"
#: As tools/cli.py registers it: `parley accounts create …`.
parley = typer.Typer()
parley.add_typer(accounts_app, name="accounts")


@pytest.fixture
def ks(cassandra, cassandra_settings) -> str:
    return cassandra_settings.keyspace


def user(cassandra, ks: str) -> str:
    cassandra.set_keyspace(ks)
    user_id, _ = create_user(cassandra, "account-test")
    return user_id


def test_an_account_signs_in_with_its_email_in_any_case_and_only_its_password(cassandra, ks) -> None:
    user_id = user(cassandra, ks)
    assert accounts.create_account(cassandra, user_id, " Ann.Account@Example.COM ", PASSWORD, keyspace=ks) == "ann.account@example.com"
    assert accounts.verify(cassandra, "ann.account@example.com", PASSWORD, keyspace=ks) == user_id
    assert accounts.verify(cassandra, "ANN.account@example.com", PASSWORD, keyspace=ks) == user_id
    assert accounts.verify(cassandra, "ann.account@example.com", PASSWORD + "!", keyspace=ks) is None
    assert accounts.verify(cassandra, "nobody@example.com", PASSWORD, keyspace=ks) is None
    assert accounts.verify(cassandra, "not an email", PASSWORD, keyspace=ks) is None
    stored = cassandra.execute(f"SELECT password_hash FROM {ks}.accounts_by_email WHERE email = 'ann.account@example.com'").one()
    assert stored.password_hash.startswith("$argon2id$") and PASSWORD not in stored.password_hash


def test_an_email_is_one_users_and_a_user_has_one_account(cassandra, ks) -> None:
    first, second = user(cassandra, ks), user(cassandra, ks)
    accounts.create_account(cassandra, first, "taken@example.com", PASSWORD, keyspace=ks)
    with pytest.raises(ValueError, match="another user's"):
        accounts.create_account(cassandra, second, "TAKEN@example.com", PASSWORD, keyspace=ks)
    with pytest.raises(ValueError, match="already has an account"):
        accounts.create_account(cassandra, first, "again@example.com", PASSWORD, keyspace=ks)
    accounts.create_account(cassandra, second, "second@example.com", PASSWORD, keyspace=ks)  # the refusal left nothing
    with pytest.raises(ValueError, match="no user"):
        accounts.create_account(cassandra, "u_missing", "x@example.com", PASSWORD, keyspace=ks)
    with pytest.raises(ValueError, match="8 to 1024"):
        accounts.create_account(cassandra, user(cassandra, ks), "short@example.com", "short", keyspace=ks)


def test_a_failure_costs_the_same_whether_or_not_the_email_has_an_account(cassandra, ks) -> None:
    accounts.create_account(cassandra, user(cassandra, ks), "timed@example.com", PASSWORD, keyspace=ks)

    def cost(email: str) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            assert accounts.verify(cassandra, email, "wrong password", keyspace=ks) is None
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    known, unknown = cost("timed@example.com"), cost("nobody-at-all@example.com")
    assert known > 0.02 and unknown > 0.02  # each paid for an argon2id hash
    assert 0.5 < known / unknown < 2.0, (known, unknown)


def test_erasure_removes_the_account_and_every_session(cassandra, ks) -> None:
    user_id = user(cassandra, ks)
    accounts.create_account(cassandra, user_id, "erased@example.com", PASSWORD, keyspace=ks)
    for n in range(2):
        cassandra.execute(f"INSERT INTO {ks}.web_sessions (session_hash, user_id) VALUES (%s, %s)", (f"h{user_id}{n}", user_id))
        cassandra.execute(f"INSERT INTO {ks}.web_sessions_by_user (user_id, session_hash) VALUES (%s, %s)", (user_id, f"h{user_id}{n}"))
    accounts.erase_accounts(cassandra, user_id, keyspace=ks)
    assert accounts.verify(cassandra, "erased@example.com", PASSWORD, keyspace=ks) is None
    assert cassandra.execute(f"SELECT * FROM {ks}.accounts_by_user WHERE user_id = %s", (user_id,)).one() is None
    assert cassandra.execute(f"SELECT * FROM {ks}.web_sessions_by_user WHERE user_id = %s", (user_id,)).one() is None
    assert cassandra.execute(f"SELECT * FROM {ks}.web_sessions WHERE session_hash = %s", (f"h{user_id}0",)).one() is None
    accounts.erase_accounts(cassandra, user_id, keyspace=ks)  # again: nothing left to do
    accounts.create_account(cassandra, user(cassandra, ks), "erased@example.com", PASSWORD, keyspace=ks)  # the email is free


def test_the_cli_reads_the_password_from_stdin_never_an_argument(cassandra, ks, cassandra_settings) -> None:
    user_id = user(cassandra, ks)
    env = {"PARLEY_KEYSPACE": ks, "PARLEY_CASSANDRA_PORT": str(cassandra_settings.port)}
    result = CliRunner().invoke(parley, ["accounts", "create", user_id, "cli@example.com", "--password-stdin"], input=PASSWORD + "\n", env=env)
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output
    assert accounts.verify(cassandra, "cli@example.com", PASSWORD, keyspace=ks) == user_id
    again = CliRunner().invoke(parley, ["accounts", "create", user_id, "cli2@example.com", "--password-stdin"], input=PASSWORD + "\n", env=env)
    assert again.exit_code == 1 and "already has an account" in again.output
    prompted = CliRunner().invoke(parley, ["accounts", "create", user(cassandra, ks), "prompt@example.com"], input=f"{PASSWORD}\n{PASSWORD}\n", env=env)
    assert prompted.exit_code == 0, prompted.output
    assert PASSWORD not in prompted.output  # the prompt hid it
