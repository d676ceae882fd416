"""Sign-in with an organisation's OpenID Connect provider: the authorization-code flow, PKCE and a nonce.

``GET /v1/auth/oidc/start`` sends the browser to the provider's authorization endpoint. The flow's state,
nonce and PKCE verifier ride in the cookie ``__Host-parley_oidc`` (HttpOnly, ten minutes), so any gateway
can finish the flow and none stores anything for it; ``SameSite=Lax``, because the provider's redirect
back is a cross-site navigation, which a Strict cookie would not go along with. The state, compared with
the cookie's, ties the answer to the browser that asked (no one can finish their flow in yours).

``GET /v1/auth/oidc/callback?code&state`` exchanges the code at the token endpoint (client_secret_basic
and the PKCE verifier), verifies the ID token (its signature by the provider's JWKS, ``iss``, ``aud`` and
``azp``, ``exp`` and ``iat``, the ``nonce``), finds the user linked to (issuer, ``sub``) — the first
sign-in creates one, a member of PARLEY_OIDC_ORG — and opens a session as a password sign-in does
(gateway/sessions.py). The browser then lands on ``/``; a failure lands on ``/?sign_in=failed`` and the
reason is logged (never a token).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway.sessions import cookie
from gateway.settings import OidcSettings
from parley.cassandra import AsyncCql
from parley.errors import Unavailable
from parley.users import new_user

if TYPE_CHECKING:
    from gateway.sessions import WebSessions

log = logging.getLogger(__name__)

FLOW_COOKIE = "__Host-parley_oidc"
FLOW_S = 600
#: Asymmetric signatures only: never ``none``, never an HMAC keyed by the client secret.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: Clock skew allowed between Parley and the provider.
LEEWAY_S = 60


class OidcError(Exception):
    """The provider's answer cannot be trusted, or the flow is not this browser's; the message says which."""


# ------------------------------------------------------------------ pure


@dataclass(frozen=True)
class Flow:
    """One browser's sign-in under way, as its cookie carries it."""

    state: str
    nonce: str
    verifier: str  # PKCE: only its S256 challenge goes to the provider with the browser

    @staticmethod
    def new() -> Flow:
        return Flow(secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(64))

    def cookie_value(self) -> str:
        return f"{self.state}.{self.nonce}.{self.verifier}"  # token_urlsafe never has a "."

    @staticmethod
    def from_cookie(value: str) -> Flow | None:
        parts = value.split(".")
        return Flow(*parts) if len(parts) == 3 and all(parts) else None


def challenge(verifier: str) -> str:
    """PKCE's S256 challenge of ``verifier`` (RFC 7636 §4.2)."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def authorization_url(endpoint: str, settings: OidcSettings, redirect_uri: str, flow: Flow) -> str:
    query = {
        "response_type": "code",
        "client_id": settings.client_id,
        "redirect_uri": redirect_uri,
        "scope": settings.scopes,
        "state": flow.state,
        "nonce": flow.nonce,
        "code_challenge": challenge(flow.verifier),
        "code_challenge_method": "S256",
    }
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


def check_claims(claims: dict[str, Any], *, issuer: str, client_id: str, nonce: str, now: float) -> str:
    """The ID token's subject once its claims check out (OIDC Core §3.1.3.7), else OidcError."""
    if claims.get("iss") != issuer:
        raise OidcError(f"the ID token's issuer is {claims.get('iss')!r}, not PARLEY_OIDC_ISSUER")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if client_id not in audiences:
        raise OidcError("the ID token is not meant for this client (aud)")
    if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != client_id:
        raise OidcError("the ID token was issued to another party (azp)")
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, (int, float)) or now > exp + LEEWAY_S:
        raise OidcError("the ID token has expired")
    if not isinstance(iat, (int, float)) or iat > now + LEEWAY_S:
        raise OidcError("the ID token was issued in the future")
    if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"].encode(), nonce.encode()):
        raise OidcError("the ID token's nonce is not this sign-in's")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise OidcError("the ID token names no subject")
    return subject


def verified_claims(id_token: str, keys: KeySet, algorithms: list[str]) -> dict[str, Any]:
    """The claims of ``id_token`` once its signature checks out against ``keys``, else OidcError."""
    try:
        token = jwt.decode(id_token, keys, algorithms=algorithms)
    except (JoseError, ValueError) as exc:
        raise OidcError(f"the ID token's signature does not check out: {type(exc).__name__}") from exc
    return dict(token.claims)


# ------------------------------------------------------------------ the provider


class Provider:
    """The provider's metadata and keys, fetched once (the keys again when a token names a new one)."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self._metadata: dict[str, Any] | None = None
        self._keys: KeySet | None = None

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            found = await self._get(url)
            if found.get("issuer") != self.settings.issuer:
                raise OidcError(f"{url} names issuer {found.get('issuer')!r}, not PARLEY_OIDC_ISSUER")
            self._metadata = found
        return self._metadata

    async def algorithms(self) -> list[str]:
        offered = (await self.metadata()).get("id_token_signing_alg_values_supported", ["RS256"])
        return [a for a in ALGORITHMS if a in offered]

    async def keys(self, *, fresh: bool = False) -> KeySet:
        if self._keys is None or fresh:
            self._keys = KeySet.import_key_set(await self._get((await self.metadata())["jwks_uri"]))
        return self._keys

    async def redeem(self, code: str, redirect_uri: str, verifier: str) -> tuple[str, str]:
        """(ID token, access token) the token endpoint gives for ``code``."""
        s = self.settings
        endpoint = (await self.metadata())["token_endpoint"]
        try:
            async with httpx.AsyncClient(timeout=s.timeout_s) as http:
                response = await http.post(
                    endpoint,
                    data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier},
                    auth=(s.client_id, s.client_secret),
                )
        except httpx.HTTPError as exc:
            raise Unavailable(f"the OpenID provider (PARLEY_OIDC_ISSUER) did not answer: {type(exc).__name__}") from exc
        if response.status_code != 200:
            error = response.json().get("error") if "json" in response.headers.get("content-type", "") else None
            raise OidcError(f"the token endpoint refused the code: {response.status_code} {error or ''}".strip())
        tokens = response.json()
        if not isinstance(tokens.get("id_token"), str):
            raise OidcError("the token endpoint gave no ID token (is `openid` in PARLEY_OIDC_SCOPES?)")
        return tokens["id_token"], str(tokens.get("access_token") or "")

    async def profile(self, access_token: str, subject: str) -> dict[str, Any]:
        """The subject's claims from the userinfo endpoint (its name, its email), or {} without one; a
        different ``sub`` there is not this person's (OIDC Core §5.3.2)."""
        endpoint = (await self.metadata()).get("userinfo_endpoint")
        if not endpoint or not access_token:
            return {}
        found = await self._get(endpoint, headers={"Authorization": f"Bearer {access_token}"})
        if found.get("sub") != subject:
            raise OidcError("the userinfo endpoint answered for another subject")
        return found

    async def subject(self, id_token: str, nonce: str) -> tuple[str, dict[str, Any]]:
        """(subject, claims) of a verified ID token."""
        algorithms = await self.algorithms()
        try:
            claims = verified_claims(id_token, await self.keys(), algorithms)
        except OidcError:
            claims = verified_claims(id_token, await self.keys(fresh=True), algorithms)  # the provider rotated its keys
        s = self.settings
        return check_claims(claims, issuer=s.issuer, client_id=s.client_id, nonce=nonce, now=time.time()), claims

    async def _get(self, url: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=self.settings.timeout_s) as http:
                response = await http.get(url, headers=headers)
            response.raise_for_status()
            return dict(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            raise Unavailable(f"the OpenID provider (PARLEY_OIDC_ISSUER) did not answer {url}: {type(exc).__name__}") from exc


class Subjects:
    """Which user a provider's subject is (``oidc_subjects``; ``oidc_subjects_by_user`` for erasure)."""

    def __init__(self, cql: AsyncCql) -> None:
        self._cql = cql

    async def user(self, issuer: str, subject: str) -> str | None:
        rows = await self._cql.run("SELECT user_id FROM {ks}.oidc_subjects WHERE issuer = ? AND subject = ?", (issuer, subject))
        return rows[0].user_id if rows else None

    async def link(self, issuer: str, subject: str, user_id: str) -> str:
        """Links the subject to ``user_id`` unless it already is to someone: the user it is linked to."""
        rows = await self._cql.run(
            "INSERT INTO {ks}.oidc_subjects (issuer, subject, user_id) VALUES (?, ?, ?) IF NOT EXISTS", (issuer, subject, user_id)
        )
        if rows and not rows[0].applied:
            return str(rows[0].user_id)
        await self._cql.run(
            "INSERT INTO {ks}.oidc_subjects_by_user (user_id, issuer, subject) VALUES (?, ?, ?)", (user_id, issuer, subject)
        )
        return user_id


# ------------------------------------------------------------------ routes


@dataclass(frozen=True)
class Oidc:
    """What the routes share: ``app.state.oidc``, when PARLEY_OIDC_ISSUER is set."""

    settings: OidcSettings
    provider: Provider
    subjects: Subjects

    @staticmethod
    def configured(settings: OidcSettings, cql: AsyncCql) -> Oidc | None:
        return Oidc(settings, Provider(settings), Subjects(cql)) if settings.enabled else None

    def redirect_uri(self, request: Request) -> str:
        return self.settings.redirect_uri or str(request.url_for("oidc_callback"))


def _oidc(request: Request) -> Oidc | None:
    return request.app.state.oidc


async def methods(request: Request) -> Response:
    """How this gateway signs people in: the page shows the organisation's button only when it may."""
    return JSONResponse({"password": True, "oidc": _oidc(request) is not None})


async def start(request: Request) -> Response:
    oidc = _oidc(request)
    if oidc is None:
        return JSONResponse({"error": {"code": "not_found", "message": "no OpenID provider is configured (PARLEY_OIDC_ISSUER)"}}, 404)
    flow = Flow.new()
    endpoint = (await oidc.provider.metadata())["authorization_endpoint"]
    response = RedirectResponse(authorization_url(endpoint, oidc.settings, oidc.redirect_uri(request), flow), 303)
    response.headers["set-cookie"] = f"{FLOW_COOKIE}={flow.cookie_value()}; Max-Age={FLOW_S}; Path=/; Secure; HttpOnly; SameSite=Lax"
    response.headers["cache-control"] = "no-store"
    return response


async def callback(request: Request) -> Response:
    oidc = _oidc(request)
    if oidc is None:
        return JSONResponse({"error": {"code": "not_found", "message": "no OpenID provider is configured (PARLEY_OIDC_ISSUER)"}}, 404)
    try:
        user_id = await _finish(request, oidc)
    except OidcError as exc:
        log.warning("an OpenID sign-in was refused", extra={"reason": str(exc)})
        return _landing("/?sign_in=failed")
    sessions: WebSessions = request.app.state.web_sessions
    session_id, _ = await sessions.open(user_id)
    response = _landing("/")
    response.headers.append("set-cookie", cookie(session_id, round(sessions.settings.max_s)))
    return response


def _landing(path: str) -> Response:
    response = RedirectResponse(path, 303)
    response.headers["set-cookie"] = f"{FLOW_COOKIE}=; Max-Age=0; Path=/; Secure; HttpOnly; SameSite=Lax"  # a flow is used once
    response.headers["cache-control"] = "no-store"
    return response


async def _finish(request: Request, oidc: Oidc) -> str:
    """The user the provider's answer signs in, else OidcError."""
    flow = Flow.from_cookie(request.cookies.get(FLOW_COOKIE, ""))
    params = request.query_params
    if flow is None:
        raise OidcError("no sign-in under way in this browser (its cookie expired, or the flow was started elsewhere)")
    if not hmac.compare_digest(params.get("state", "").encode(), flow.state.encode()):
        raise OidcError("the answer's state is not this browser's sign-in")
    if "iss" in params and params["iss"] != oidc.settings.issuer:
        raise OidcError("the answer comes from another issuer (RFC 9207)")  # a mix-up with another provider
    if "error" in params:
        raise OidcError(f"the provider refused: {params['error'][:100]}")
    code = params.get("code", "")
    if not code:
        raise OidcError("the answer carries no code")
    id_token, access_token = await oidc.provider.redeem(code, oidc.redirect_uri(request), flow.verifier)
    subject, claims = await oidc.provider.subject(id_token, flow.nonce)
    issuer = oidc.settings.issuer
    user_id = await oidc.subjects.user(issuer, subject)
    if user_id is None:
        profile = {**claims, **await oidc.provider.profile(access_token, subject)}
        user_id = await _first_sign_in(request, oidc, issuer, subject, profile)
    if await request.app.state.services.auth.of_user(user_id) is None:
        raise OidcError(f"user {user_id} is disabled")
    return user_id


async def _first_sign_in(request: Request, oidc: Oidc, issuer: str, subject: str, claims: dict[str, Any]) -> str:
    """A new member of PARLEY_OIDC_ORG for the subject (or whoever a concurrent first sign-in made)."""
    directory = request.app.state.services.directory
    org = await directory.org(oidc.settings.org)
    if org is None or org.disabled:
        raise OidcError(f"PARLEY_OIDC_ORG={oidc.settings.org} is not a live organisation")
    name = str(claims.get("name") or claims.get("email") or subject)[:200]
    user_id, _, statements = new_user(name, oidc.settings.tier, org_id=org.org_id, role="member")
    linked = await oidc.subjects.link(issuer, subject, user_id)
    if linked == user_id:
        await directory.apply(statements)
        log.info("an OpenID subject's first sign-in made a user", extra={"user_id": user_id, "org_id": org.org_id})
    return linked


ROUTES = [
    Route("/v1/auth/methods", methods, methods=["GET"]),
    Route("/v1/auth/oidc/start", start, methods=["GET"]),
    Route("/v1/auth/oidc/callback", callback, methods=["GET"], name="oidc_callback"),
]
