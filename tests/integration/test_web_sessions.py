"""Web sessions over HTTP on real Cassandra: the /v1/auth/* routes and the authenticator's cookie branch,
in a Starlette app of their own (no Kafka needed): sign-in, CSRF, expiry, sign-out, limits, erasure."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.auth import Authenticator
from gateway.directory import Directory
from gateway.errors import ApiError
from gateway.oidc import Subjects
from gateway.session_store import SessionStore
from gateway.sessions import COOKIE, ROUTES, WebSessions, hash_session
from gateway.settings import SessionSettings
from parley import accounts
from parley.cassandra import AsyncCql
from parley.users import create_user

PASSWORD = "correct horse battery"
SITE = "https://testserver"  # what TestClient's requests are addressed to (Secure cookies need https)
PAGE = {"Origin": SITE, "Sec-Fetch-Site": "same-origin"}  # what the browser adds to the page's own requests
SETTINGS = SessionSettings(cache_s=0.0, signin_per_address=8, signin_per_email=3, signin_window_s=60.0)


async def whoami(request: Request) -> Response:
    user = await request.app.state.services.auth(request)
    return JSONResponse({"user_id": user.user_id, "method": request.method, "key_id": user.key_id})


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


def app(cql: AsyncCql, settings: SessionSettings) -> Starlette:
    auth = Authenticator(Directory(cql), cache_s=0.0)
    gateway = Starlette(
        routes=[*ROUTES, Route("/whoami", whoami, methods=["GET", "POST", "DELETE"])],
        exception_handlers={ApiError: _api_error},
    )
    gateway.state.services = SimpleNamespace(auth=auth)
    gateway.state.web_sessions = auth.sessions = WebSessions(settings, SessionStore(cql))
    return gateway


@pytest.fixture
def account(cassandra, cassandra_settings) -> Iterator[tuple[str, str, str]]:
    """(user_id, email, API key) of a user with a password account."""
    cassandra.set_keyspace(cassandra_settings.keyspace)
    user_id, key = create_user(cassandra, "web-user")
    email = f"{user_id}@example.com"
    accounts.create_account(cassandra, user_id, email, PASSWORD)
    yield user_id, email, key


@pytest.fixture
def client(cassandra_settings) -> Iterator[Callable[..., TestClient]]:
    """Makes a gateway of the /v1/auth/* routes and a client of it, from an address of its own (``address``
    names a shared one): the sign-in limits of one test do not reach the next."""
    made: list[AsyncCql] = []

    def make(settings: SessionSettings = SETTINGS, address: str | None = None) -> TestClient:
        made.append(AsyncCql(cassandra_settings))
        return TestClient(app(made[-1], settings), base_url=SITE, client=(address or f"10.{uuid.uuid4().int % 2**16}.0.1", 50000))

    yield make
    for cql in made:
        if cql._session is not None:
            cql._session.cluster.shutdown()


def sign_in(http: TestClient, email: str, password: str = PASSWORD, **headers: str):
    return http.post("/v1/auth/sign-in", json={"email": email, "password": password}, headers={**PAGE, **headers})


def test_sign_in_opens_a_session_in_a_host_only_httponly_strict_cookie(account, cassandra, client, cassandra_settings) -> None:
    user_id, email, _ = account
    with client() as http:
        r = sign_in(http, email.upper())
        assert r.status_code == 200, r.text
        set_cookie = r.headers["set-cookie"]
        for attribute in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/", f"Max-Age={round(SETTINGS.max_s)}"):
            assert attribute in set_cookie
        assert set_cookie.startswith(f"{COOKIE}=") and "Domain" not in set_cookie
        body = r.json()
        assert body["user_id"] == user_id and body["role"] == "admin" and body["org_id"].startswith("o_")
        assert r.headers["cache-control"] == "no-store"
        session_id = http.cookies[COOKIE]
        stored = cassandra.execute(
            f"SELECT user_id, csrf_token FROM {cassandra_settings.keyspace}.web_sessions WHERE session_hash = %s", (hash_session(session_id),)
        ).one()
        assert stored.user_id == user_id and stored.csrf_token == body["csrf_token"]
        assert session_id not in str(list(cassandra.execute(f"SELECT * FROM {cassandra_settings.keyspace}.web_sessions")))
        assert http.get("/v1/auth/session").json()["csrf_token"] == body["csrf_token"]
        assert http.get("/whoami").json() == {"user_id": user_id, "method": "GET", "key_id": ""}


def test_a_write_needs_the_token_and_the_pages_origin(account, client) -> None:
    user_id, email, key = account
    with client() as http:
        token = sign_in(http, email).json()["csrf_token"]
        refused = {
            "no token": PAGE,
            "another session's token": {**PAGE, "X-CSRF-Token": "x" * len(token)},
            "a cross-site form post": {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "X-CSRF-Token": token},
            "no origin at all": {"X-CSRF-Token": token},
        }
        for why, headers in refused.items():
            for method in ("POST", "DELETE"):
                r = http.request(method, "/whoami", headers=headers)
                assert r.status_code == 403, (why, r.text)
                assert r.json()["error"]["code"] == "csrf_failed"
        assert http.post("/whoami", headers={**PAGE, "X-CSRF-Token": token}).json()["user_id"] == user_id
        # API clients send a key: no cookie session, no CSRF check (the cookie is ignored beside a key).
        with TestClient(http.app, base_url=SITE) as api:
            assert api.post("/whoami", headers={"Authorization": f"Bearer {key}"}).json()["key_id"].startswith("key_")
        assert http.post("/whoami", headers={"Authorization": f"Bearer {key}"}).json()["key_id"].startswith("key_")


def test_sign_in_only_from_the_gateways_own_origin(account, client) -> None:
    _, email, _ = account
    with client() as http:
        r = http.post("/v1/auth/sign-in", json={"email": email, "password": PASSWORD}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and COOKIE not in http.cookies


def test_wrong_passwords_unknown_emails_and_disabled_users_get_one_answer(account, cassandra, client, cassandra_settings) -> None:
    user_id, email, _ = account
    with client(replace(SETTINGS, signin_per_email=0, signin_per_address=0)) as http:
        for who, password in ((email, "wrong password"), ("nobody@example.com", PASSWORD), ("not an email", PASSWORD)):
            r = sign_in(http, who, password)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_credentials"
            assert "set-cookie" not in r.headers
        cassandra.execute(f"UPDATE {cassandra_settings.keyspace}.users SET disabled = true WHERE user_id = %s", (user_id,))
        r = sign_in(http, email)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_credentials"


def test_an_idle_session_ends_and_so_does_an_old_one_however_used(account, client) -> None:
    _, email, _ = account
    with client(replace(SETTINGS, idle_s=2.0)) as http:
        assert sign_in(http, email).status_code == 200
        for _ in range(6):  # used every 0.5 s: the idle clock moves on
            time.sleep(0.5)
            assert http.get("/whoami").status_code == 200
        time.sleep(2.5)
        r = http.get("/whoami")
        assert r.status_code == 401 and r.json()["error"]["code"] == "session_expired"
        assert http.get("/v1/auth/session").status_code == 401
    with client(replace(SETTINGS, idle_s=2.0, max_s=4.0)) as http:
        assert sign_in(http, email).status_code == 200
        signed_in = time.monotonic()  # the session was made before this
        while time.monotonic() - signed_in < 3.2:  # never idle for long, yet past its 4 s it ends
            assert http.get("/whoami").status_code == 200
            time.sleep(0.4)
        time.sleep(max(0.0, 4.1 - (time.monotonic() - signed_in)))
        assert http.get("/whoami").status_code == 401


def test_sign_out_ends_the_session_on_the_server(account, cassandra, client, cassandra_settings) -> None:
    _, email, _ = account
    with client() as http:
        token = sign_in(http, email).json()["csrf_token"]
        session_id = http.cookies[COOKIE]
        assert http.post("/v1/auth/sign-out", headers=PAGE).status_code == 403  # no token: still signed in
        assert http.get("/whoami").status_code == 200
        r = http.post("/v1/auth/sign-out", headers={**PAGE, "X-CSRF-Token": token})
        assert r.status_code == 204 and "Max-Age=0" in r.headers["set-cookie"]
        row = cassandra.execute(
            f"SELECT * FROM {cassandra_settings.keyspace}.web_sessions WHERE session_hash = %s", (hash_session(session_id),)
        ).one()
        assert row is None
        # The cookie, kept by someone who copied it, opens nothing any more.
        with TestClient(http.app, base_url=SITE, cookies={COOKIE: session_id}) as thief:
            assert thief.get("/whoami").status_code == 401
        assert http.post("/v1/auth/sign-out", headers=PAGE).status_code == 204  # nothing left to end


def test_failed_sign_ins_are_limited_per_email_and_per_address(account, client) -> None:
    _, email, _ = account
    with client() as http:
        for _ in range(3):
            assert sign_in(http, email, "wrong password").status_code == 401
        r = sign_in(http, email)  # the right password, but the email's window is full
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_sign_ins"
        assert 50 <= int(r.headers["retry-after"]) <= 60
        # Other emails from the same address: 8 failures in all, then the address is refused too.
        for n in range(5):
            assert sign_in(http, f"other-{n}-{email}", "wrong password").status_code == 401
        r = sign_in(http, f"fresh-{email}", "wrong password")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


def test_the_limits_are_shared_by_every_gateway(account, client) -> None:
    _, email, _ = account
    with client(address="10.1.2.3") as one, client(address="10.1.2.3") as two:
        assert sign_in(one, email, "wrong password").status_code == 401
        assert sign_in(two, email, "wrong password").status_code == 401
        assert sign_in(one, email, "wrong password").status_code == 401
        assert sign_in(two, email).status_code == 429


def test_erasure_signs_the_user_out_everywhere(account, client) -> None:
    user_id, email, _ = account
    cached = replace(SETTINGS, cache_s=60.0)  # the gateway that erases forgets at once; the other within its cache
    with client(cached) as first, client() as second:
        assert sign_in(first, email).status_code == 200 and sign_in(second, email).status_code == 200
        assert first.get("/whoami").status_code == 200
        first.portal.call(first.app.state.web_sessions.erase, user_id)
        assert first.get("/whoami").status_code == 401 and second.get("/whoami").status_code == 401
        assert sign_in(first, email).status_code == 401


def test_an_openid_subject_links_to_one_user_and_erasure_unlinks_it(cassandra, cassandra_settings) -> None:
    cql = AsyncCql(cassandra_settings)
    subjects = Subjects(cql)

    async def links() -> tuple[str, str, str | None]:
        first = await subjects.link("https://idp.example.com", "alice", "u_first")
        second = await subjects.link("https://idp.example.com", "alice", "u_second")  # a racing first sign-in
        return first, second, await subjects.user("https://idp.example.com", "alice")

    try:
        assert asyncio.run(links()) == ("u_first", "u_first", "u_first")
        accounts.erase_accounts(cassandra, "u_first", keyspace=cassandra_settings.keyspace)
        assert asyncio.run(subjects.user("https://idp.example.com", "alice")) is None
    finally:
        if cql._session is not None:
            cql._session.cluster.shutdown()
