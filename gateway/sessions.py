"""The web page's sign-in: password accounts → sessions in an HttpOnly cookie, with CSRF protection.

``POST /v1/auth/sign-in {email, password}`` checks the password (parley/accounts.py) and opens a session:
a random id in the cookie ``__Host-parley_session`` (``HttpOnly; Secure; SameSite=Strict; Path=/``), only
its SHA-256 in Cassandra. A session ends after PARLEY_SESSION_IDLE_S unused or PARLEY_SESSION_MAX_S in
all, at ``POST /v1/auth/sign-out``, or when its user is erased. ``GET /v1/auth/session`` says who is
signed in and gives the page its CSRF token, which it keeps in memory only.

A request with no ``Authorization`` header and the cookie is authenticated here (gateway/auth.py calls
``WebSessions.authenticate``). A cookie-authenticated POST/PUT/PATCH/DELETE must carry the session's
token in ``X-CSRF-Token`` (compared in constant time) and come from the gateway's own origin
(``Sec-Fetch-Site``, ``Origin``), else 403 before anything happens: SameSite=Strict already keeps the
cookie off other sites' requests, the token and the origin check hold where it does not (an old browser,
a sibling subdomain). API clients send a key and are not subject to any of it.

Each sign-in attempt takes a slot in the sign-in limits before its password is checked
(gateway/sign_in_limits.py: per client address, per email and address, per email from unfamiliar
addresses; 429 with Retry-After when one is full), so concurrent guesses cannot outrun them; the address
is the one gateway/client_address.py decides. A failure costs one argon2 hash whether or not the email
has an account.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.errors import ApiError, BadRequest, Unauthorized
from gateway.session_store import SessionStore, WebSession
from gateway.settings import SessionSettings
from gateway.sign_in_limits import AttemptStore, SignInLimits
from gateway.validation import json_body, string
from parley import accounts
from parley.errors import Unavailable
from parley.lru import LRU

if TYPE_CHECKING:  # gateway/auth.py imports this module: its session branch calls WebSessions
    from gateway.auth import Authenticator, Principal

log = logging.getLogger(__name__)

#: ``__Host-``: the browser takes it only with Secure, Path=/ and no Domain, so no subdomain can plant one.
COOKIE = "__Host-parley_session"
CSRF_HEADER = "x-csrf-token"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Sessions a gateway keeps looked up, and apart, unknown or ended ones: junk cookies churn only the latter.
CACHE_ENTRIES = 10_000


class Forbidden(ApiError):
    status, code = 403, "csrf_failed"


# ------------------------------------------------------------------ pure


def hash_session(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def cookie(session_id: str, max_age_s: int) -> str:
    return f"{COOKIE}={session_id}; Max-Age={max_age_s}; Path=/; Secure; HttpOnly; SameSite=Strict"


def cleared_cookie() -> str:
    return f"{COOKIE}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Strict"


def expired(session: WebSession, now: float, settings: SessionSettings) -> bool:
    return now >= session.expires_at(settings.idle_s, settings.max_s)


def origin_refusal(headers: Headers, allowed: frozenset[str]) -> str | None:
    """Why a cookie-authenticated write does not come from the page's own origin, or None when it does.

    ``Sec-Fetch-Site`` (every current browser sends it) must be ``same-origin`` unless ``Origin`` is one
    of ``allowed``; ``Origin`` must name the host the request was sent to (``Host``), or be ``allowed``.
    """
    origin = headers.get("origin", "").rstrip("/").lower()
    if origin and origin in allowed:
        return None
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"a {site} request may not use this session"
    if not origin or origin == "null":
        return "a write with a session cookie must say its Origin"
    if urlsplit(origin).netloc != headers.get("host", "").lower():
        return "the request comes from another origin"
    return None


#: Hosts a browser keeps Secure cookies from over plain HTTP (potentially trustworthy origins).
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def insecure_page(headers: Headers) -> str | None:
    """Why the browser would drop the session cookie (a page on plain HTTP, not local), or None."""
    origin = urlsplit(headers.get("origin", ""))
    if origin.scheme == "http" and origin.hostname not in LOCAL_HOSTS:
        return f"the page is served over plain HTTP from {origin.hostname}: browsers keep the session cookie only over HTTPS"
    return None


def csrf_refusal(method: str, headers: Headers, session: WebSession, allowed: frozenset[str]) -> str | None:
    """Why an unsafe request on ``session`` is refused (403), or None (a safe method, or it checks out)."""
    if method.upper() not in UNSAFE:
        return None
    token = headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(token.encode(), session.csrf_token.encode()):
        return f"send the session's CSRF token in {CSRF_HEADER} (GET /v1/auth/session gives it)"
    return origin_refusal(headers, allowed)


# ------------------------------------------------------------------ sessions


class WebSessions:
    """Sessions of this gateway's users: opened, looked up (cached ``cache_s``), kept alive, closed."""

    def __init__(self, settings: SessionSettings, store: SessionStore) -> None:
        self.settings = settings
        self.store = store
        self.limits = SignInLimits(settings, AttemptStore(store.cql))
        #: The idle clock is written at most this often: often enough that the idle expiry is within a tenth.
        self._touch_s = min(60.0, settings.idle_s / 10)
        self._found: LRU[str, tuple[float, WebSession]] = LRU(CACHE_ENTRIES)
        self._missing: LRU[str, float] = LRU(CACHE_ENTRIES)

    async def open(self, user_id: str) -> tuple[str, WebSession]:
        """A new session of ``user_id``: (the id for the cookie, the session)."""
        session_id = secrets.token_urlsafe(32)
        now = time.time()
        session = WebSession(hash_session(session_id), user_id, secrets.token_urlsafe(32), now, now)
        await self.store.insert(session, session.ttl_s(now, self.settings.max_s))
        self._remember(session.session_hash, session)
        return session_id, session

    async def current(self, request: Request) -> WebSession | None:
        """The live session the request's cookie names, its idle clock moved; None without one."""
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            return None
        session_hash = hash_session(session_id)
        now = time.time()
        session = await self._lookup(session_hash)
        if session is not None and expired(session, now, self.settings):
            session = await self._lookup(session_hash, fresh=True)  # another gateway may have moved its clock
        if session is None or expired(session, now, self.settings):
            self._remember(session_hash, None)
            return None
        if now - session.seen_at >= self._touch_s:
            session = replace(session, seen_at=now)
            try:
                await self.store.touch(session, session.ttl_s(now, self.settings.max_s))
            except Unavailable:
                log.warning("a session's idle clock was not moved: Cassandra is unavailable")
            self._remember(session_hash, session)
        return session

    async def authenticate(self, request: Request) -> WebSession:
        """The request's session: 401 without a live one, 403 for a write that fails the CSRF check."""
        session = await self.current(request)
        if session is None:
            raise Unauthorized("your session has ended; sign in again", code="session_expired")
        refusal = csrf_refusal(request.method, request.headers, session, self.settings.allowed_origins)
        if refusal is not None:
            raise Forbidden(refusal)
        return session

    async def close(self, session: WebSession) -> None:
        await self.store.delete(session)
        self._remember(session.session_hash, None)

    async def erase(self, user_id: str) -> None:
        """The user's account and every session of theirs gone (the user's erasure): signed out here at once,
        on other gateways within PARLEY_SESSION_CACHE_S."""
        await self.store.erase(user_id)
        for session_hash, (_, session) in self._found.items():
            if session.user_id == user_id:
                self._remember(session_hash, None)

    def public(self, session: WebSession, user: Principal) -> dict[str, object]:
        """What the page learns of its session: who, its CSRF token, when it ends unless used."""
        s = self.settings
        return {
            "user_id": user.user_id,
            "org_id": user.org_id,
            "role": user.role,
            "csrf_token": session.csrf_token,
            "idle_timeout_s": s.idle_s,
            "expires_at": round(session.created_at + s.max_s, 3),
        }

    async def _lookup(self, session_hash: str, *, fresh: bool = False) -> WebSession | None:
        now = time.monotonic()
        hit = self._found.get(session_hash)
        if not fresh and hit is not None and now - hit[0] <= self.settings.cache_s:
            return hit[1]
        missed = self._missing.get(session_hash)
        if not fresh and missed is not None and now - missed <= self.settings.cache_s:
            return None
        try:
            session = await self.store.get(session_hash)
        except Unavailable:
            if hit is None:
                raise
            return hit[1]  # Cassandra down: a session this gateway knows goes on until it expires
        self._remember(session_hash, session)
        return session

    def _remember(self, session_hash: str, session: WebSession | None) -> None:
        if session is None:
            self._found.pop(session_hash)
            self._missing.put(session_hash, time.monotonic())
        else:
            self._missing.pop(session_hash)
            self._found.put(session_hash, (time.monotonic(), session))


# ------------------------------------------------------------------ routes


def _sessions(request: Request) -> WebSessions:
    return request.app.state.web_sessions


def _authenticator(request: Request) -> Authenticator:
    return request.app.state.services.auth


async def sign_in(request: Request) -> Response:
    sessions = _sessions(request)
    body = await json_body(request, 8192)
    email = string(body, "email", max_chars=254)
    password = string(body, "password", max_chars=accounts.MAX_PASSWORD, allow_empty=True)
    refusal = origin_refusal(request.headers, sessions.settings.allowed_origins)
    if refusal is not None:
        raise Forbidden(refusal)  # no one else's page may sign a browser in (login CSRF)
    insecure = insecure_page(request.headers)
    if insecure is not None:
        raise BadRequest(insecure, code="insecure_origin")
    # The peer, or what a trusted proxy saw (gateway/client_address.py): never the client's own claim.
    address = request.client.host if request.client else "unknown"
    attempt = await sessions.limits.reserve(address, email)  # counted before the password is looked at
    user_id = await sessions.store.verify(email, password)
    user = None if user_id is None else await _authenticator(request).of_user(user_id)
    if user is None:  # a wrong password, no such account, or a disabled user: one answer for all
        raise Unauthorized("that email and password were not accepted", code="invalid_credentials")
    await sessions.limits.succeeded(attempt)
    session_id, session = await sessions.open(user.user_id)
    response = JSONResponse(sessions.public(session, user), headers={"Cache-Control": "no-store"})
    response.headers["set-cookie"] = cookie(session_id, round(sessions.settings.max_s))
    return response


async def get_session(request: Request) -> Response:
    sessions = _sessions(request)
    session = await sessions.authenticate(request)
    user = await _authenticator(request).of_user(session.user_id)
    if user is None:
        raise Unauthorized("this account can no longer sign in", code="session_expired")
    return JSONResponse(sessions.public(session, user), headers={"Cache-Control": "no-store"})


async def sign_out(request: Request) -> Response:
    """Ends the cookie's session (a write: CSRF-checked) and clears the cookie; without a live session
    there is nothing to end, and the answer is the same."""
    sessions = _sessions(request)
    session = await sessions.current(request)
    if session is not None:
        refusal = csrf_refusal(request.method, request.headers, session, sessions.settings.allowed_origins)
        if refusal is not None:
            raise Forbidden(refusal)
        await sessions.close(session)
    response = Response(status_code=204)
    response.headers["set-cookie"] = cleared_cookie()
    return response


ROUTES = [
    Route("/v1/auth/sign-in", sign_in, methods=["POST"]),
    Route("/v1/auth/sign-out", sign_out, methods=["POST"]),
    Route("/v1/auth/session", get_session, methods=["GET"]),
]
