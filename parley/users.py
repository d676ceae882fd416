"""Users and their API keys. A key is shown once; only its SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime, timezone

from cassandra.cluster import Session

TIERS = ("free", "plus", "enterprise")
KEY_PREFIX = "pk_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_user(session: Session, name: str, tier: str = "free", label: str = "default") -> tuple[str, str]:
    """Create a user with one API key; returns (user_id, api_key)."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    user_id = f"u_{uuid.uuid4().hex[:16]}"
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    now = datetime.now(timezone.utc)
    session.execute(
        "INSERT INTO users (user_id, name, tier, created_at) VALUES (%s, %s, %s, %s)", (user_id, name, tier, now)
    )
    session.execute(
        "INSERT INTO api_keys (key_hash, user_id, label, created_at, revoked) VALUES (%s, %s, %s, %s, false)",
        (hash_key(key), user_id, label, now),
    )
    return user_id, key
