"""Organisations, users and their API keys (DESIGN.md §12).

A user belongs to one organisation for life: its personal one (made with the
user, id derived from the user's) or a team organisation an admin added it to.
Every read the API serves is keyed by the user, so a user's reads never leave
its organisation. A key is shown once; only its SHA-256 is stored, and people
name it by its ``key_id`` (the hash's first 12 hex digits).

What a credential may do is its scopes (``SCOPES``); what a user may do is its
role. A key, which its user hands to clients, holds ``chat`` only: it reads and
writes its user's own content. The web session, where the user signed in
themselves, holds every scope: ``account`` (make and revoke keys, erase the
account) and ``admin`` (run the organisation, which also needs the admin role).
Keys store their scopes; a key stored before scopes, or with one a key may not
hold, has ``chat`` (``key_scopes``).

Writes are built here as CQL statements (``Statement``) and run by whoever
holds a session: ``execute`` for the CLI and the test stacks (sync driver),
the gateway's store for the admin API (async), so both write the same rows.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from cassandra.cluster import Session

TIERS = ("free", "plus", "enterprise")
ROLES = ("member", "admin")
KEY_PREFIX = "pk_"

#: ``chat``: the caller's own conversations, documents, memory, usage, models, moderations.
#: ``account``: making and revoking the caller's keys, erasing the caller.
#: ``admin``: running the caller's organisation (its people, their keys' revocation, usage, settings), for
#: a user whose role is admin.
CHAT, ACCOUNT, ADMIN = "chat", "account", "admin"
SCOPES = (CHAT, ACCOUNT, ADMIN)
#: What a key may hold: a key pasted into a client must not outlive its own revocation by minting others,
#: erase the account, or run the organisation.
KEY_SCOPES = frozenset({CHAT})
#: What the web session holds: the user signed in themselves.
SESSION_SCOPES = frozenset(SCOPES)


@dataclass(frozen=True)
class Statement:
    """One CQL write with ``?`` markers; ``{ks}`` is the keyspace."""

    cql: str
    params: tuple


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key_hash: str) -> str:
    return "key_" + key_hash[:12]


def personal_org_id(user_id: str) -> str:
    """A user's personal organisation: derived, so users made before organisations have one too."""
    return "o_" + user_id.removeprefix("u_")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")


def check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")


def key_scopes(stored: object) -> frozenset[str]:
    """A key's scopes from its row: ``chat`` for a key made before scopes (null), and never more than
    ``KEY_SCOPES``, whatever a row says."""
    held = frozenset(stored or ()) & KEY_SCOPES  # type: ignore[arg-type]
    return held or frozenset({CHAT})


def new_org(name: str, *, personal: bool = False, org_id: str | None = None) -> tuple[str, list[Statement]]:
    """A new organisation (id ``o_…``) and the statement that writes it."""
    org_id = org_id or f"o_{uuid.uuid4().hex[:16]}"
    return org_id, [
        Statement(
            "INSERT INTO {ks}.orgs (org_id, name, personal, disabled, created_at) VALUES (?, ?, ?, false, ?)",
            (org_id, name, personal, _now()),
        )
    ]


def new_user(name: str, tier: str, *, org_id: str | None = None, role: str = "member") -> tuple[str, str, list[Statement]]:
    """(user_id, org_id, statements) of a new user; without ``org_id`` it gets a personal
    organisation, of which it is the admin."""
    check_tier(tier)
    check_role(role)
    user_id = f"u_{uuid.uuid4().hex[:16]}"
    statements: list[Statement] = []
    if org_id is None:
        org_id, statements = new_org(name, personal=True, org_id=personal_org_id(user_id))
        role = "admin"
    statements += [
        Statement(
            "INSERT INTO {ks}.users (user_id, name, tier, org_id, role, disabled, created_at) VALUES (?, ?, ?, ?, ?, false, ?)",
            (user_id, name, tier, org_id, role, _now()),
        ),
        Statement("INSERT INTO {ks}.users_by_org (org_id, user_id) VALUES (?, ?)", (org_id, user_id)),
    ]
    return user_id, org_id, statements


def new_key(user_id: str, label: str = "default", scopes: frozenset[str] = KEY_SCOPES) -> tuple[str, str, list[Statement]]:
    """(key_id, key, statements) of a new API key for ``user_id``; the key is shown once."""
    if not scopes or not scopes <= KEY_SCOPES:
        raise ValueError(f"a key holds only {sorted(KEY_SCOPES)}; {sorted(scopes - KEY_SCOPES) or 'none'} need the web session")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    digest = hash_key(key)
    key_id, now = key_id_of(digest), _now()
    held = set(scopes)
    return key_id, key, [
        Statement(
            "INSERT INTO {ks}.api_keys (key_hash, user_id, key_id, label, created_at, revoked, scopes) VALUES (?, ?, ?, ?, ?, false, ?)",
            (digest, user_id, key_id, label, now, held),
        ),
        Statement(
            "INSERT INTO {ks}.keys_by_user (user_id, key_id, key_hash, label, created_at, scopes) VALUES (?, ?, ?, ?, ?, ?)",
            (user_id, key_id, digest, label, now, held),
        ),
    ]


def revoke_key(user_id: str, key_id: str, key_hash: str) -> list[Statement]:
    return [
        Statement("UPDATE {ks}.api_keys SET revoked = true WHERE key_hash = ?", (key_hash,)),
        Statement("UPDATE {ks}.keys_by_user SET revoked_at = ? WHERE user_id = ? AND key_id = ?", (_now(), user_id, key_id)),
    ]


def execute(session: Session, statements: list[Statement]) -> None:
    for s in statements:
        session.execute(session.prepare(s.cql.format(ks=session.keyspace)), s.params)


def create_user(
    session: Session, name: str, tier: str = "free", label: str = "default", *, org_id: str | None = None, role: str = "member"
) -> tuple[str, str]:
    """Create a user with one API key; returns (user_id, api_key)."""
    user_id, _, statements = new_user(name, tier, org_id=org_id, role=role)
    _, key, key_statements = new_key(user_id, label)
    execute(session, statements + key_statements)
    return user_id, key


def create_org(session: Session, name: str) -> str:
    org_id, statements = new_org(name)
    execute(session, statements)
    return org_id


def create_key(session: Session, user_id: str, label: str = "default") -> tuple[str, str]:
    """A new key for an existing user (rotation: make the new one, then revoke the old)."""
    if session.execute(session.prepare("SELECT user_id FROM users WHERE user_id = ?"), (user_id,)).one() is None:
        raise ValueError(f"no such user: {user_id}")
    key_id, key, statements = new_key(user_id, label)
    execute(session, statements)
    return key_id, key


def revoke(session: Session, user_id: str, key_id: str) -> None:
    row = session.execute(
        session.prepare("SELECT key_hash FROM keys_by_user WHERE user_id = ? AND key_id = ?"), (user_id, key_id)
    ).one()
    if row is None:
        raise ValueError(f"user {user_id} has no key {key_id}")
    execute(session, revoke_key(user_id, key_id, row.key_hash))
