"""Password accounts: a user's email and the argon2id hash of their password, for the web page's sign-in.

The email is case-folded and unique (a lightweight transaction on ``accounts_by_email``); a user has at
most one account. Passwords are never stored, logged or returned: only ``argon2-cffi``'s encoded hash,
which carries its own salt and parameters, so a change of parameters rehashes on the next good sign-in.
``verify`` costs one hash whether or not the email has an account (a dummy hash stands in), so its time
does not tell which emails exist. The sessions a sign-in opens are the gateway's (gateway/sessions.py);
``erase_accounts`` removes them with the account.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timezone

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from cassandra import DriverException, RequestExecutionException
from cassandra.cluster import NoHostAvailable, ResultSet, Session

from parley.errors import StoreUnavailable

#: RFC 9106's second recommended option (argon2-cffi's default): argon2id, t=3, m=64 MiB, p=4.
HASHER = PasswordHasher()
#: NIST SP 800-63B: at least 8 characters; long passphrases are welcome, a bound keeps a hash cheap to refuse.
MIN_PASSWORD, MAX_PASSWORD = 8, 1024
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


def _run(session: Session, keyspace: str | None, cql: str, values: tuple[object, ...]) -> ResultSet:
    """``cql`` on ``keyspace`` (default: the session's), its driver errors as ``StoreUnavailable`` (the
    gateway answers 503)."""
    keyspace = keyspace or session.keyspace
    if not keyspace:
        raise ValueError("a session without a keyspace needs keyspace=")
    try:
        return session.execute(cql.replace("{ks}", keyspace), values)
    except (NoHostAvailable, RequestExecutionException, DriverException, OSError) as exc:
        raise StoreUnavailable(f"Cassandra failed on the accounts tables: {type(exc).__name__}: {exc}") from exc


def normal_email(email: str) -> str:
    """``email`` as accounts are keyed: trimmed and case-folded; ValueError when it is not an address."""
    folded = email.strip().casefold()
    if len(folded) > 254 or not _EMAIL.match(folded):
        raise ValueError(f"not an email address: {email!r}")
    return folded


def check_password(password: str) -> None:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise ValueError(f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters")


def create_account(session: Session, user_id: str, email: str, password: str, *, keyspace: str | None = None) -> str:
    """Give user ``user_id`` a password account; returns the email as stored. ValueError (with a message
    for the person at the CLI) for an unknown user, one that has an account, a taken email, or a bad
    password. ``keyspace``: where a session without one (the gateway's) finds the tables."""
    email = normal_email(email)
    check_password(password)
    run = functools.partial(_run, session, keyspace)
    if run("SELECT user_id FROM {ks}.users WHERE user_id = %s", (user_id,)).one() is None:
        raise ValueError(f"no user {user_id}; `parley users create` makes one")
    password_hash = HASHER.hash(password)
    now = datetime.now(timezone.utc)
    # Both claims are transactions, the user's first: two racing creations cannot both win either.
    mine = run(
        "INSERT INTO {ks}.accounts_by_user (user_id, email, created_at) VALUES (%s, %s, %s) IF NOT EXISTS",
        (user_id, email, now),
    )
    if not mine.was_applied:
        raise ValueError(f"user {user_id} already has an account ({mine.one().email})")
    taken = run(
        "INSERT INTO {ks}.accounts_by_email (email, user_id, password_hash, created_at) VALUES (%s, %s, %s, %s) "
        "IF NOT EXISTS",
        (email, user_id, password_hash, now),
    )
    if not taken.was_applied:
        run("DELETE FROM {ks}.accounts_by_user WHERE user_id = %s", (user_id,))
        raise ValueError(f"{email} is another user's account")
    return email


@functools.cache
def _dummy_hash() -> str:
    return HASHER.hash("not anyone's password")


def verify(session: Session, email: str, password: str, *, keyspace: str | None = None) -> str | None:
    """The user id whose account this is, or None. Blocking and CPU-heavy (~0.15 s, 64 MiB): the gateway
    runs it in a thread."""
    run = functools.partial(_run, session, keyspace)
    try:
        email = normal_email(email)
    except ValueError:
        row = None
    else:
        row = run("SELECT user_id, password_hash FROM {ks}.accounts_by_email WHERE email = %s", (email,)).one()
    stored = row.password_hash if row is not None else _dummy_hash()
    try:
        HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return None
    if row is None:
        return None  # someone typed the dummy's password
    if HASHER.check_needs_rehash(stored):
        run("UPDATE {ks}.accounts_by_email SET password_hash = %s WHERE email = %s", (HASHER.hash(password), email))
    return str(row.user_id)


def erase_accounts(session: Session, user_id: str, *, keyspace: str | None = None) -> None:
    """Remove the user's account, its links to OpenID subjects and every web session of theirs (signed out
    everywhere at once). Idempotent: a user without an account is a no-op."""
    run = functools.partial(_run, session, keyspace)
    for row in run("SELECT session_hash FROM {ks}.web_sessions_by_user WHERE user_id = %s", (user_id,)):
        run("DELETE FROM {ks}.web_sessions WHERE session_hash = %s", (row.session_hash,))
    run("DELETE FROM {ks}.web_sessions_by_user WHERE user_id = %s", (user_id,))
    account = run("SELECT email FROM {ks}.accounts_by_user WHERE user_id = %s", (user_id,)).one()
    if account is not None:
        run("DELETE FROM {ks}.accounts_by_email WHERE email = %s", (account.email,))
    run("DELETE FROM {ks}.accounts_by_user WHERE user_id = %s", (user_id,))
    for row in run("SELECT issuer, subject FROM {ks}.oidc_subjects_by_user WHERE user_id = %s", (user_id,)):
        run("DELETE FROM {ks}.oidc_subjects WHERE issuer = %s AND subject = %s", (row.issuer, row.subject))
    run("DELETE FROM {ks}.oidc_subjects_by_user WHERE user_id = %s", (user_id,))
