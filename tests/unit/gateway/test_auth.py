"""Credentials and their scopes (gateway/auth.py, parley/users.py; DESIGN.md §12): a key holds ``chat``
only, whatever its row says; a web session holds every scope (the admin role is checked apart, by
gateway/admin.py); a credential without the scope a route names is a 403 ``insufficient_scope``. The directory and the
session rows are in memory here; tests/e2e/test_authz_matrix.py runs the same rules over the real stack."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from starlette.requests import Request

from gateway.auth import Authenticator, Principal, require
from gateway.directory import OrgRow, UserRow
from gateway.errors import ApiError, Forbidden
from gateway.session_store import WebSession
from gateway.sessions import COOKIE, WebSessions, hash_session
from gateway.settings import SessionSettings
from parley.users import ACCOUNT, ADMIN, CHAT, SESSION_SCOPES, hash_key, key_scopes, new_key

KEY, OLD_KEY, FORGED_KEY, ADMIN_KEY = "pk_member", "pk_before_scopes", "pk_row_says_account", "pk_admin"


class Directory:
    """The rows ``Authenticator`` reads: keys as (user, key id, the row's scopes as stored)."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, str, Any]] = {
            hash_key(KEY): ("u_member", "key_1", {"chat"}),
            hash_key(OLD_KEY): ("u_member", "key_2", None),  # made before scopes: the column is null
            hash_key(FORGED_KEY): ("u_member", "key_3", {"account", "admin"}),
            hash_key(ADMIN_KEY): ("u_admin", "key_4", {"chat"}),
        }

    async def key(self, digest: str) -> tuple[str, str, frozenset[str]] | None:
        found = self.keys.get(digest)
        return None if found is None else (found[0], found[1], key_scopes(found[2]))

    async def user(self, user_id: str) -> UserRow | None:
        role = "admin" if user_id == "u_admin" else "member"
        return UserRow(user_id, user_id, "plus", "o_team", role, False, False, None)

    async def org(self, org_id: str) -> OrgRow | None:
        return OrgRow(org_id, "team", False, None, False)


class Sessions:
    """``SessionStore``'s reads: one live session each for the member and the admin."""

    cql = None  # the sign-in limits' store is built on it; nothing here signs in

    def __init__(self) -> None:
        now = time.time()
        self.rows = {hash_session(f"sid-{u}"): WebSession(hash_session(f"sid-{u}"), u, "csrf", now, now) for u in ("u_member", "u_admin")}

    async def get(self, session_hash: str) -> WebSession | None:
        return self.rows.get(session_hash)

    async def touch(self, session: WebSession, ttl_s: int) -> None:
        pass


def _auth() -> Authenticator:
    auth = Authenticator(Directory(), cache_s=30.0)  # type: ignore[arg-type]
    auth.sessions = WebSessions(SessionSettings(), Sessions())  # type: ignore[arg-type]
    return auth


def _request(*, key: str | None = None, session_of: str | None = None) -> Request:
    headers = []
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    if session_of is not None:
        headers.append((b"cookie", f"{COOKIE}=sid-{session_of}".encode()))
    return Request({"type": "http", "method": "GET", "path": "/v1/me", "headers": headers, "query_string": b""})


def _call(request: Request, scope: str = CHAT) -> Principal:
    return asyncio.run(_auth()(request, scope))


def _refusal(request: Request, scope: str) -> ApiError:
    with pytest.raises(ApiError) as refused:
        _call(request, scope)
    return refused.value


@pytest.mark.parametrize("key", [KEY, OLD_KEY, FORGED_KEY, ADMIN_KEY])
def test_every_key_holds_chat_and_nothing_more(key: str) -> None:
    assert _call(_request(key=key)).scopes == {CHAT}


@pytest.mark.parametrize("scope", [ACCOUNT, ADMIN])
@pytest.mark.parametrize("key", [KEY, OLD_KEY, FORGED_KEY, ADMIN_KEY])
def test_a_key_on_an_account_or_admin_route_is_a_403_insufficient_scope(key: str, scope: str) -> None:
    refused = _refusal(_request(key=key), scope)
    assert (refused.status, refused.code) == (403, "insufficient_scope")
    assert scope in refused.message


def test_a_session_holds_every_scope_whatever_its_users_role() -> None:
    member = _call(_request(session_of="u_member"), ACCOUNT)
    assert member.scopes == {CHAT, ACCOUNT, ADMIN} and member.key_id == "" and member.role == "member"
    assert _call(_request(session_of="u_admin"), ADMIN).admin


def test_a_key_sent_beside_a_session_cookie_is_what_counts() -> None:
    """The bearer header wins (gateway/auth.py), so a client's key never borrows the browser's scopes."""
    request = _request(key=KEY, session_of="u_admin")
    assert _call(request).user_id == "u_member"
    assert _refusal(request, ACCOUNT).code == "insufficient_scope"


def test_without_a_credential_it_is_a_401_before_any_scope() -> None:
    refused = _refusal(_request(), ACCOUNT)
    assert (refused.status, refused.code) == (401, "missing_api_key")
    assert _refusal(_request(key="pk_unknown"), ACCOUNT).status == 401


def test_require_passes_a_held_scope_and_refuses_another() -> None:
    session = Principal("u", "free", scopes=SESSION_SCOPES)
    assert require(session, ACCOUNT) is session
    with pytest.raises(Forbidden):
        require(Principal("u", "free", scopes=frozenset({CHAT})), ADMIN)
    assert Principal("u", "free").scopes == {CHAT}  # a principal made without scopes holds chat only


def test_a_key_is_made_with_chat_and_never_with_more() -> None:
    _, key, statements = new_key("u_1")
    assert key.startswith("pk_") and all({"chat"} in s.params for s in statements)
    for scopes in ({ACCOUNT}, {CHAT, ADMIN}, frozenset()):
        with pytest.raises(ValueError, match="web session|holds only"):
            new_key("u_1", scopes=frozenset(scopes))


def test_stored_scopes_read_as_chat_when_null_and_are_cut_to_what_a_key_may_hold() -> None:
    assert key_scopes(None) == {CHAT}
    assert key_scopes(set()) == {CHAT}
    assert key_scopes({"chat", "account"}) == {CHAT}
    assert key_scopes({"admin"}) == {CHAT}
