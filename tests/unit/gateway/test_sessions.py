"""The pure parts of web sessions: CSRF and origin checks, expiry, the cookie (the sign-in limits:
test_sign_in_limits.py)."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from gateway.session_store import WebSession
from gateway.sessions import (
    COOKIE,
    cleared_cookie,
    cookie,
    csrf_refusal,
    expired,
    hash_session,
    insecure_page,
    origin_refusal,
)
from gateway.settings import SessionSettings
from parley.errors import ConfigError

SETTINGS = SessionSettings(idle_s=600, max_s=3600)
SESSION = WebSession(hash_session("sid"), "u_1", "token-123", created_at=1000.0, seen_at=1000.0)
OWN = {"host": "chat.example.com", "origin": "https://chat.example.com", "sec-fetch-site": "same-origin"}


def headers(**values: str) -> Headers:
    return Headers({k.replace("_", "-"): v for k, v in values.items()})


def test_a_write_with_the_token_from_the_page_itself_passes() -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert csrf_refusal(method, headers(**OWN, x_csrf_token="token-123"), SESSION, frozenset()) is None


def test_safe_methods_need_no_token() -> None:
    assert csrf_refusal("GET", headers(host="chat.example.com"), SESSION, frozenset()) is None
    assert csrf_refusal("HEAD", headers(), SESSION, frozenset()) is None


@pytest.mark.parametrize("token", ["", "token-12", "token-1234", "TOKEN-123", "other"])
def test_a_write_without_the_sessions_token_is_refused(token: str) -> None:
    refusal = csrf_refusal("POST", headers(**OWN, x_csrf_token=token), SESSION, frozenset())
    assert refusal is not None and "x-csrf-token" in refusal


@pytest.mark.parametrize(
    "sent",
    [
        {"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
        {"origin": "https://evil.chat.example.com", "sec-fetch-site": "same-site"},
        {"origin": "https://evil.example"},  # an old browser: no Sec-Fetch-Site
        {"origin": "null"},  # a sandboxed frame, a data: page
        {},  # nothing says where it comes from
        {"origin": "https://chat.example.com", "sec-fetch-site": "cross-site"},  # the two disagree
    ],
)
def test_a_write_from_another_origin_is_refused_even_with_the_token(sent: dict[str, str]) -> None:
    sent = {"host": "chat.example.com", "x-csrf-token": "token-123", **sent}
    assert csrf_refusal("POST", Headers(sent), SESSION, frozenset()) is not None


def test_configured_origins_may_write() -> None:
    allowed = SessionSettings(origins="https://App.example.com/, https://other.example").allowed_origins
    assert allowed == {"https://app.example.com", "https://other.example"}
    sent = headers(host="api.example.com", origin="https://app.example.com", sec_fetch_site="same-site")
    assert origin_refusal(sent, allowed) is None
    assert origin_refusal(sent, frozenset()) is not None


def test_origin_is_compared_with_the_host_including_the_port() -> None:
    assert origin_refusal(headers(host="127.0.0.1:8000", origin="http://127.0.0.1:8000"), frozenset()) is None
    assert origin_refusal(headers(host="127.0.0.1:8000", origin="http://127.0.0.1:8001"), frozenset()) is not None


def test_a_page_on_plain_http_is_told_the_cookie_would_not_stick() -> None:
    for local in ("http://localhost:8000", "http://127.0.0.1:8000", "http://[::1]:8000", "https://chat.example.com"):
        assert insecure_page(headers(origin=local)) is None
    refusal = insecure_page(headers(origin="http://chat.example.com"))
    assert refusal is not None and "HTTPS" in refusal


def test_a_session_expires_when_idle_or_when_old() -> None:
    assert not expired(SESSION, 1000 + 599, SETTINGS)
    assert expired(SESSION, 1000 + 600, SETTINGS)  # idle
    used = WebSession(SESSION.session_hash, "u_1", "t", created_at=1000.0, seen_at=1000.0 + 3500)
    assert not expired(used, 1000 + 3599, SETTINGS)
    assert expired(used, 1000 + 3600, SETTINGS)  # however recently used
    assert used.expires_at(600, 3600) == 4600
    assert used.ttl_s(1000 + 3599.5, 3600) == 1
    assert used.ttl_s(1000 + 10, 3600) == 3590


def test_the_cookie_is_host_only_secure_httponly_strict() -> None:
    value = cookie("abc", 3600)
    assert value.startswith(f"{COOKIE}=abc;") and COOKIE.startswith("__Host-")
    for attribute in ("Max-Age=3600", "Path=/", "Secure", "HttpOnly", "SameSite=Strict"):
        assert attribute in value.split("; ")
    assert "Domain" not in value
    assert "Max-Age=0" in cleared_cookie()


def test_only_the_hash_of_a_session_id_is_kept() -> None:
    assert hash_session("sid") != "sid" and len(hash_session("sid")) == 64


def test_settings_refuse_negative_or_zero_lifetimes() -> None:
    with pytest.raises(ConfigError, match="PARLEY_SESSION_SIGNIN_PER_EMAIL"):
        SessionSettings(signin_per_email=-1)
    with pytest.raises(ConfigError, match="PARLEY_SESSION_IDLE_S"):
        SessionSettings(idle_s=0)
