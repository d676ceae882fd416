"""The pure parts of OIDC sign-in: PKCE, the authorization URL, the flow cookie, and every check an ID token
must pass before its subject is believed (signature, iss, aud/azp, exp, iat, nonce, sub)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

from gateway.oidc import ALGORITHMS, Flow, OidcError, authorization_url, challenge, check_claims, verified_claims
from gateway.settings import OidcSettings
from parley.errors import ConfigError

ISSUER, CLIENT = "https://idp.example.com", "parley"
NOW = 1_700_000_000.0
SIGNER = RSAKey.generate_key(2048, parameters={"kid": "k1"})
PUBLISHED = KeySet.import_key_set({"keys": [SIGNER.as_dict(private=False)]})


def claims(**changes: object) -> dict[str, object]:
    good: dict[str, object] = {"iss": ISSUER, "aud": CLIENT, "sub": "alice", "nonce": "n-1", "exp": NOW + 300, "iat": NOW - 5}
    good.update(changes)
    return {k: v for k, v in good.items() if v is not None}


def check(**changes: object) -> str:
    return check_claims(claims(**changes), issuer=ISSUER, client_id=CLIENT, nonce="n-1", now=NOW)


def test_pkce_s256_matches_rfc_7636s_example() -> None:
    assert challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_the_authorization_url_asks_for_a_code_with_pkce_state_and_nonce() -> None:
    flow = Flow.new()
    settings = OidcSettings(issuer=ISSUER, client_id=CLIENT, client_secret="s", org="o_1")
    url = authorization_url(f"{ISSUER}/auth", settings, "https://chat.example.com/v1/auth/oidc/callback", flow)
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert url.startswith(f"{ISSUER}/auth?")
    assert query == {
        "response_type": "code", "client_id": CLIENT, "redirect_uri": "https://chat.example.com/v1/auth/oidc/callback",
        "scope": "openid email profile", "state": flow.state, "nonce": flow.nonce,
        "code_challenge": challenge(flow.verifier), "code_challenge_method": "S256",
    }  # fmt: skip
    assert flow.verifier not in url  # only its challenge travels with the browser


def test_the_flow_cookie_round_trips_and_refuses_anything_else() -> None:
    flow = Flow.new()
    assert Flow.from_cookie(flow.cookie_value()) == flow
    assert len({flow.state, flow.nonce, flow.verifier}) == 3
    for broken in ("", "a.b", "a..c", "a.b.c.d"):
        assert Flow.from_cookie(broken) is None


def test_good_claims_give_the_subject() -> None:
    assert check() == "alice"
    assert check(aud=[CLIENT, "other"], azp=CLIENT) == "alice"
    assert check(exp=NOW - 30) == "alice"  # within the clock skew allowed


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"iss": "https://evil.example.com"}, "issuer"),
        ({"aud": "someone-else"}, "aud"),
        ({"aud": None}, "aud"),
        ({"aud": [CLIENT, "other"]}, "azp"),  # several audiences: azp must name this client
        ({"azp": "someone-else"}, "azp"),
        ({"exp": NOW - 120}, "expired"),
        ({"exp": None}, "expired"),
        ({"iat": NOW + 600}, "future"),
        ({"nonce": "n-2"}, "nonce"),
        ({"nonce": None}, "nonce"),  # a replayed token from a flow without one
        ({"sub": ""}, "subject"),
    ],
)
def test_claims_that_do_not_check_out_are_refused(changes: dict[str, object], reason: str) -> None:
    with pytest.raises(OidcError, match=reason):
        check(**changes)


def test_the_signature_must_be_the_providers() -> None:
    signed = jwt.encode({"alg": "RS256", "kid": "k1"}, claims(), SIGNER)
    assert verified_claims(signed, PUBLISHED, list(ALGORITHMS))["sub"] == "alice"
    head, body, signature = signed.split(".")
    forged_body = jwt.encode({"alg": "RS256", "kid": "k1"}, claims(sub="mallory"), SIGNER).split(".")[1]
    with pytest.raises(OidcError):
        verified_claims(f"{head}.{forged_body}.{signature}", PUBLISHED, list(ALGORITHMS))
    stranger = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    with pytest.raises(OidcError):
        verified_claims(jwt.encode({"alg": "RS256", "kid": "k1"}, claims(), stranger), PUBLISHED, list(ALGORITHMS))


def test_unsigned_and_hmac_tokens_are_refused() -> None:
    assert "none" not in ALGORITHMS and not any(a.startswith("HS") for a in ALGORITHMS)
    hmac_key = OctKey.import_key(b"the client secret, as some providers sign with it")
    hs256 = jwt.encode({"alg": "HS256"}, claims(), hmac_key)
    with pytest.raises(OidcError):
        verified_claims(hs256, KeySet([hmac_key]), list(ALGORITHMS))
    unsigned = hs256.rsplit(".", 1)[0].split(".")[1]
    with pytest.raises(OidcError):
        verified_claims(f"eyJhbGciOiJub25lIn0.{unsigned}.", PUBLISHED, list(ALGORITHMS))


def test_settings_name_what_is_missing() -> None:
    assert not OidcSettings().enabled
    with pytest.raises(ConfigError, match="PARLEY_OIDC_CLIENT_SECRET, PARLEY_OIDC_ORG"):
        OidcSettings(issuer=ISSUER, client_id=CLIENT)
    with pytest.raises(ConfigError, match="openid"):
        OidcSettings(issuer=ISSUER, client_id=CLIENT, client_secret="s", org="o_1", scopes="email")
