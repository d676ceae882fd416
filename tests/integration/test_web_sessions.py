"""Web sessions over HTTP on real Cassandra: the /v1/auth/* routes and the authenticator's cookie branch,
in a Starlette app of their own (no Kafka needed), behind the gateway's client-address middleware: sign-in,
CSRF, expiry, sign-out, limits (concurrent guesses, forged X-Forwarded-For, the owner under attack), erasure."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway import client_address
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
SETTINGS = SessionSettings(
    cache_s=0.0, signin_per_address=8, signin_per_email_address=3, signin_per_email=5, signin_window_s=60.0
)
#: The edge, as PARLEY_GATEWAY_TRUSTED_PROXIES names it: only its X-Forwarded-For is believed.
EDGE = "10.255.0.1"


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
        middleware=[client_address.middleware(client_address.trusted_proxies(EDGE))],
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
        return TestClient(app(made[-1], settings), base_url=SITE, client=(address or fresh_address(), 50000))

    yield make
    for cql in made:
        if cql._session is not None:
            cql._session.cluster.shutdown()


def sign_in(http: TestClient, email: str, password: str = PASSWORD, **headers: str):
    return http.post("/v1/auth/sign-in", json={"email": email, "password": password}, headers={**PAGE, **headers})


def fresh_address() -> str:
    """An address no other test signs in from (the limits of one test do not reach the next)."""
    n = uuid.uuid4().int
    return f"10.{n % 250}.{n // 250 % 250}.{n // 62500 % 250 + 2}"


@contextlib.asynccontextmanager
async def gateways(cassandra_settings, count: int) -> AsyncIterator[list[Starlette]]:
    """``count`` gateways of the /v1/auth/* routes, each with its own Cassandra session, as replicas are."""
    cqls = [AsyncCql(cassandra_settings) for _ in range(count)]
    try:
        yield [app(cql, SETTINGS) for cql in cqls]
    finally:
        for cql in cqls:
            cql.close()


def async_client(gateway: Starlette, address: str) -> httpx.AsyncClient:
    """A client of ``gateway`` connecting from ``address`` (a direct client, not through the edge)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(gateway, client=(address, 50000)), base_url=SITE)


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
    with client(replace(SETTINGS, signin_per_email=0, signin_per_email_address=0, signin_per_address=0)) as http:
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


def test_sign_ins_are_limited_per_email_and_address_and_per_address(account, client) -> None:
    _, email, _ = account
    with client() as http:
        for _ in range(3):
            assert sign_in(http, email, "wrong password").status_code == 401
        r = sign_in(http, email)  # the right password, but this address has had its tries at this email
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_sign_ins"
        assert 50 <= int(r.headers["retry-after"]) <= 60
        # Other emails from the same address: 8 attempts in all, then the address is refused too.
        for n in range(5):
            assert sign_in(http, f"other-{n}-{email}", "wrong password").status_code == 401
        r = sign_in(http, f"fresh-{email}", "wrong password")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


def test_a_good_sign_in_gives_its_attempt_back(account, client) -> None:
    _, email, _ = account
    with client(replace(SETTINGS, signin_per_address=2)) as http:
        for _ in range(4):  # four good sign-ins from an address allowed two attempts
            assert sign_in(http, email).status_code == 200
        assert sign_in(http, email, "wrong password").status_code == 401
        assert sign_in(http, email, "wrong password").status_code == 401
        assert sign_in(http, email).status_code == 429  # failures stay counted


def test_the_limits_are_shared_by_every_gateway(account, client) -> None:
    _, email, _ = account
    address = fresh_address()
    with client(address=address) as one, client(address=address) as two:
        assert sign_in(one, email, "wrong password").status_code == 401
        assert sign_in(two, email, "wrong password").status_code == 401
        assert sign_in(one, email, "wrong password").status_code == 401
        assert sign_in(two, email).status_code == 429


@pytest.mark.parametrize(("addresses", "limit"), [(1, SETTINGS.signin_per_email_address), (20, SETTINGS.signin_per_email)])
async def test_concurrent_guesses_stop_at_the_limit_across_gateways(account, cassandra_settings, addresses, limit) -> None:
    """20 wrong passwords at once, half on each of two gateways: exactly the limit's number reach the
    password check (401), the rest are refused before it (429). From one address the email-and-address
    limit binds, from twenty the email's own."""
    _, email, _ = account
    sources = [fresh_address() for _ in range(addresses)]
    async with gateways(cassandra_settings, 2) as pair:
        clients = [async_client(pair[n % 2], sources[n % addresses]) for n in range(20)]
        guesses = (http.post("/v1/auth/sign-in", json={"email": email, "password": "wrong"}, headers=PAGE) for http in clients)
        answers = await asyncio.gather(*guesses)
        assert sorted(r.status_code for r in answers) == [401] * limit + [429] * (20 - limit), [r.text for r in answers]
        right = await clients[0].post("/v1/auth/sign-in", json={"email": email, "password": PASSWORD}, headers=PAGE)
        assert right.status_code == 429  # the limit holds after the burst, for the right password too
        for http in clients:
            await http.aclose()


def test_a_direct_clients_forwarded_for_does_not_change_the_counted_address(account, client) -> None:
    _, email, _ = account
    with client() as direct:  # not a trusted proxy: its X-Forwarded-For is a claim, ignored
        for n in range(8):
            r = sign_in(direct, f"other-{n}-{email}", "wrong password", **{"X-Forwarded-For": f"198.51.100.{n}"})
            assert r.status_code == 401
        r = sign_in(direct, f"fresh-{email}", "wrong password", **{"X-Forwarded-For": "198.51.100.200"})
        assert r.status_code == 429
    # Through the edge, the address it appended counts; what the client put before it does not.
    behind_edge, neighbour = fresh_address(), fresh_address()
    with client(address=EDGE) as edge:
        for n in range(8):
            r = sign_in(edge, f"edge-{n}-{email}", "wrong password", **{"X-Forwarded-For": f"6.6.6.{n}, {behind_edge}"})
            assert r.status_code == 401
        r = sign_in(edge, f"edge-x-{email}", "wrong password", **{"X-Forwarded-For": f"6.6.6.99, {behind_edge}"})
        assert r.status_code == 429
        assert sign_in(edge, email, **{"X-Forwarded-For": neighbour}).status_code == 200  # not everyone behind the edge


def test_the_owner_signs_in_while_an_attacker_hammers_their_email(account, client) -> None:
    _, email, _ = account
    home = fresh_address()
    with client(address=home) as owner:  # the owner's usual address
        assert sign_in(owner, email).status_code == 200
    with client() as attacker:  # one address gets 3 guesses at the email, however fast it tries
        assert [sign_in(attacker, email, f"guess {n}").status_code for n in range(10)] == [401] * 3 + [429] * 7
    with client() as travelling:  # the owner somewhere new: one attacker does not fill the email's own limit
        assert sign_in(travelling, email).status_code == 200
    # Attackers spread over addresses fill it: 5 guesses from addresses the owner never signed in from.
    guesses = []
    for _ in range(3):
        with client() as attacker:
            guesses += [sign_in(attacker, email, "guess").status_code for _ in range(3)]
    assert guesses.count(401) == 2 and guesses.count(429) == 7
    with client() as elsewhere:  # the trade-off: the owner at a new address waits with the attackers
        r = sign_in(elsewhere, email)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    with client(address=home) as owner:  # where the owner signed in before, they are not counted against it
        assert sign_in(owner, email).status_code == 200


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
