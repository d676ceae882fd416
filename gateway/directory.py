"""Who is who: organisations, users and API keys as the gateway reads and changes them (DESIGN.md §12).

The rows are written by statements built in ``parley/users.py``, so the CLI and
the admin API write the same thing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from parley.cassandra import AsyncCql
from parley.users import Statement, key_scopes, personal_org_id


@dataclass(frozen=True)
class UserRow:
    user_id: str
    name: str
    tier: str
    org_id: str
    role: str
    disabled: bool
    erased: bool
    created_at: datetime | None

    def public(self) -> dict[str, Any]:
        return {
            "id": self.user_id, "name": self.name, "tier": self.tier, "org_id": self.org_id, "role": self.role,
            "disabled": self.disabled, "created_at": _iso(self.created_at),
        }  # fmt: skip


@dataclass(frozen=True)
class OrgRow:
    org_id: str
    name: str
    personal: bool
    residency: str | None
    disabled: bool
    moderation_policy: dict[str, Any] | None = None  # its own (org_policies), else the tier's
    tool_rules: list[dict[str, Any]] | None = None  # its own rules for Parley's tools (org_tool_rules), else none

    def public(self) -> dict[str, Any]:
        return {
            "id": self.org_id, "name": self.name, "personal": self.personal, "residency": self.residency,
            "disabled": self.disabled, "moderation_policy": self.moderation_policy, "tool_rules": self.tool_rules,
        }  # fmt: skip


@dataclass(frozen=True)
class KeyRow:
    key_id: str
    key_hash: str
    label: str
    created_at: datetime | None
    revoked_at: datetime | None
    scopes: frozenset[str] = frozenset({"chat"})

    def public(self) -> dict[str, Any]:
        return {
            "id": self.key_id, "label": self.label, "scopes": sorted(self.scopes), "created_at": _iso(self.created_at),
            "revoked_at": _iso(self.revoked_at),
        }  # fmt: skip


def _iso(value: datetime | None) -> str | None:
    """RFC 3339, as the OpenAPI document's date-time: the driver hands back naive UTC."""
    return None if value is None else value.replace(tzinfo=None).isoformat() + "Z"


def _user(r: Any) -> UserRow:
    personal = r.org_id is None  # made before organisations: its personal one, which it administers
    return UserRow(
        user_id=r.user_id, name=r.name or "", tier=r.tier or "free",
        org_id=r.org_id or personal_org_id(r.user_id), role=r.role or ("admin" if personal else "member"),
        disabled=bool(r.disabled), erased=r.erased_at is not None, created_at=r.created_at,
    )  # fmt: skip


_USER = "SELECT user_id, name, tier, org_id, role, disabled, erased_at, created_at FROM {ks}.users WHERE user_id = ?"


class Directory:
    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    async def apply(self, statements: list[Statement]) -> None:
        for s in statements:
            await self._cql.run(s.cql, s.params)

    async def key(self, key_hash: str) -> tuple[str, str, frozenset[str]] | None:
        """(user_id, key_id, scopes) of a live API key, or None."""
        rows = await self._cql.run("SELECT user_id, key_id, revoked, scopes FROM {ks}.api_keys WHERE key_hash = ?", (key_hash,))
        if not rows or rows[0].revoked:
            return None
        return rows[0].user_id, rows[0].key_id or "", key_scopes(rows[0].scopes)

    async def user(self, user_id: str) -> UserRow | None:
        rows = await self._cql.run(_USER, (user_id,))
        return _user(rows[0]) if rows else None

    async def org(self, org_id: str) -> OrgRow | None:
        rows, policies, tool_rules = await asyncio.gather(
            self._cql.run("SELECT org_id, name, personal, residency, disabled FROM {ks}.orgs WHERE org_id = ?", (org_id,)),
            self._cql.run("SELECT policy FROM {ks}.org_policies WHERE org_id = ?", (org_id,)),
            self._cql.run("SELECT rules FROM {ks}.org_tool_rules WHERE org_id = ?", (org_id,)),
        )
        if not rows:
            return None
        r = rows[0]
        policy = json.loads(policies[0].policy) if policies and policies[0].policy else None
        rules = json.loads(tool_rules[0].rules) if tool_rules and tool_rules[0].rules else None
        return OrgRow(r.org_id, r.name or "", bool(r.personal), r.residency, bool(r.disabled), policy, rules)

    async def members(self, org_id: str) -> list[UserRow]:
        ids = await self._cql.run("SELECT user_id FROM {ks}.users_by_org WHERE org_id = ?", (org_id,))
        users = await asyncio.gather(*(self.user(r.user_id) for r in ids))
        return [u for u in users if u is not None and not u.erased]

    async def keys(self, user_id: str) -> list[KeyRow]:
        rows = await self._cql.run(
            "SELECT key_id, key_hash, label, created_at, revoked_at, scopes FROM {ks}.keys_by_user WHERE user_id = ?", (user_id,)
        )
        return [KeyRow(r.key_id, r.key_hash, r.label or "", r.created_at, r.revoked_at, key_scopes(r.scopes)) for r in rows]
