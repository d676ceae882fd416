"""Gateway settings (env vars PARLEY_GATEWAY_*)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from gateway.client_address import trusted_proxies
from parley.errors import ConfigError
from parley.settings import env
from parley.shards import Shard, parse_shard
from schemas.catalog import TOPICS


@dataclass(frozen=True)
class GatewaySettings:
    host: str = env("PARLEY_GATEWAY_HOST", "127.0.0.1", "Address the gateway listens on")
    port: int = env("PARLEY_GATEWAY_PORT", 8000, "Port the gateway listens on")
    max_body_bytes: int = env("PARLEY_GATEWAY_MAX_BODY", 256 * 1024, "Largest request body accepted (413 above)")
    max_message_chars: int = env("PARLEY_GATEWAY_MAX_MESSAGE_CHARS", 32_000, "Longest message text (413 above)")
    import_max_bytes: int = env(
        "PARLEY_GATEWAY_IMPORT_MAX_BYTES", 32 * 1024 * 1024, "Largest export POST /v1/imports takes, JSON or zip (413 above)"
    )
    auth_cache_s: float = env("PARLEY_GATEWAY_AUTH_CACHE_S", 30.0, "Seconds an API key lookup is cached")
    stream_ping_s: float = env("PARLEY_GATEWAY_PING_S", 15.0, "SSE keep-alive comment interval")
    append_timeout_s: float = env(
        "PARLEY_GATEWAY_APPEND_TIMEOUT_S", 10.0, "How long to wait for Kafka to acknowledge an append before 503"
    )
    abandon_grace_s: float = env(
        "PARLEY_GATEWAY_ABANDON_GRACE_S", 60.0, "A reply nobody reads for this long is cancelled (reason abandoned)"
    )
    retry_after_s: int = env("PARLEY_GATEWAY_RETRY_AFTER_S", 5, "Retry-After sent with 503 when Kafka is unavailable")
    auth_stale_s: float = env(
        "PARLEY_GATEWAY_AUTH_STALE_S",
        3600.0,
        "While Cassandra is down, a key verified within this many seconds keeps working (a revocation waits as long)",
    )
    broker_probe_s: float = env(
        "PARLEY_GATEWAY_BROKER_PROBE_S", 2.0, "Seconds between checks that Kafka answers (readiness, fast 503s)"
    )
    region: str = env(
        "PARLEY_GATEWAY_REGION",
        "",
        "Region this gateway serves (docs/multi-region.md): an organisation whose residency names another"
        " is answered 421 with its home region; empty: one region, no check",
    )
    drain_s: float = env(
        "PARLEY_GATEWAY_DRAIN_S",
        20.0,
        "On SIGTERM, how long replies in flight may finish before their streams are told to resume elsewhere",
    )
    shard: str = env(
        "PARLEY_GATEWAY_SHARD",
        "",
        "`i/N`: this gateway owns the chat.tokens partitions p with p % N == i (the edge routes their conversations "
        "here, new conversations are minted on them); empty: unsharded, owns every partition",
    )
    borrowed_idle_s: float = env(
        "PARLEY_GATEWAY_BORROWED_IDLE_S",
        2.0,
        "A chat.tokens partition this gateway does not own (a resume or failover landed here) is unassigned this many "
        "seconds after its last stream ends (owned ones after 30 s)",
    )
    trusted_proxies: str = env(
        "PARLEY_GATEWAY_TRUSTED_PROXIES",
        "127.0.0.1,::1",
        "Addresses and CIDR networks of the proxies in front of the gateway (the edge, a TLS terminator): only "
        "from these is X-Forwarded-For believed, and then only its right-most untrusted address "
        "(gateway/client_address.py); empty: every peer is the client",
    )

    def __post_init__(self) -> None:
        self.token_shard  # a malformed PARLEY_GATEWAY_SHARD fails at start-up, naming itself
        self.proxies  # and so does a malformed PARLEY_GATEWAY_TRUSTED_PROXIES
        if self.borrowed_idle_s < 0:
            raise ConfigError(f"PARLEY_GATEWAY_BORROWED_IDLE_S must be >= 0, got {self.borrowed_idle_s}")

    @property
    def token_shard(self) -> Shard | None:
        """The parsed PARLEY_GATEWAY_SHARD (None: unsharded)."""
        return parse_shard(self.shard, TOPICS["chat.tokens"].partitions)

    @property
    def proxies(self) -> tuple[str, ...]:
        """The parsed PARLEY_GATEWAY_TRUSTED_PROXIES, as networks."""
        return trusted_proxies(self.trusted_proxies)


@dataclass(frozen=True)
class QuotaSettings:
    """Quotas per tier (gateway/quotas.py); 0 means unlimited. Tokens are prompt + completion, per UTC day."""

    free_tokens_per_day: int = env("PARLEY_QUOTA_FREE_TOKENS_PER_DAY", 100_000, "Tokens a free user may use per UTC day")
    free_requests_per_minute: int = env(
        "PARLEY_QUOTA_FREE_REQUESTS_PER_MINUTE", 20, "Generations a free user may start per minute"
    )
    plus_tokens_per_day: int = env("PARLEY_QUOTA_PLUS_TOKENS_PER_DAY", 2_000_000, "Tokens a plus user may use per UTC day")
    plus_requests_per_minute: int = env(
        "PARLEY_QUOTA_PLUS_REQUESTS_PER_MINUTE", 300, "Generations a plus user may start per minute"
    )
    enterprise_tokens_per_day: int = env(
        "PARLEY_QUOTA_ENTERPRISE_TOKENS_PER_DAY", 0, "Tokens an enterprise user may use per UTC day"
    )
    enterprise_requests_per_minute: int = env(
        "PARLEY_QUOTA_ENTERPRISE_REQUESTS_PER_MINUTE", 0, "Generations an enterprise user may start per minute"
    )
    free_uploads_per_day: int = env("PARLEY_QUOTA_FREE_UPLOADS_PER_DAY", 20, "Documents a free user may upload per UTC day")
    free_upload_bytes_per_day: int = env(
        "PARLEY_QUOTA_FREE_UPLOAD_BYTES_PER_DAY", 100 * 2**20, "Bytes of documents a free user may upload per UTC day"
    )
    plus_uploads_per_day: int = env("PARLEY_QUOTA_PLUS_UPLOADS_PER_DAY", 200, "Documents a plus user may upload per UTC day")
    plus_upload_bytes_per_day: int = env(
        "PARLEY_QUOTA_PLUS_UPLOAD_BYTES_PER_DAY", 2**30, "Bytes of documents a plus user may upload per UTC day"
    )
    enterprise_uploads_per_day: int = env(
        "PARLEY_QUOTA_ENTERPRISE_UPLOADS_PER_DAY", 0, "Documents an enterprise user may upload per UTC day"
    )
    enterprise_upload_bytes_per_day: int = env(
        "PARLEY_QUOTA_ENTERPRISE_UPLOAD_BYTES_PER_DAY", 0, "Bytes of documents an enterprise user may upload per UTC day"
    )
    timeout_s: float = env(
        "PARLEY_QUOTA_TIMEOUT_S", 1.0, "Longest a quota check waits for Cassandra; after that the request goes through"
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0 or (f.name == "timeout_s" and value == 0):
                raise ConfigError(f"{f.metadata['env']} must be {'positive' if f.name == 'timeout_s' else '>= 0'}, got {value}")


# ------------------------------------------------------------------ web sign-in (gateway/sessions.py)


@dataclass(frozen=True)
class SessionSettings:
    """The web page's sessions, their sign-in limits and the response headers (docs/web-sign-in.md)."""

    idle_s: float = env("PARLEY_SESSION_IDLE_S", 1800.0, "A web session unused this many seconds is signed out")
    max_s: float = env(
        "PARLEY_SESSION_MAX_S", 43200.0, "A web session ends this many seconds after sign-in, however much it is used"
    )
    cache_s: float = env(
        "PARLEY_SESSION_CACHE_S",
        5.0,
        "Seconds a gateway trusts a session it looked up (a sign-out on another gateway takes this long to reach it)",
    )
    signin_window_s: float = env(
        "PARLEY_SESSION_SIGNIN_WINDOW_S", 900.0, "The sliding window of the sign-in limits, in seconds"
    )
    signin_per_address: int = env(
        "PARLEY_SESSION_SIGNIN_PER_ADDRESS",
        30,
        "Sign-in attempts one client address may make per window, to any emails; a success is given back (0: no limit)",
    )
    signin_per_email_address: int = env(
        "PARLEY_SESSION_SIGNIN_PER_EMAIL_ADDRESS",
        10,
        "Sign-in attempts to one email from one client address per window; a success is given back (0: no limit)",
    )
    signin_per_email: int = env(
        "PARLEY_SESSION_SIGNIN_PER_EMAIL",
        20,
        "Sign-in attempts to one email per window from addresses where it has not signed in lately (addresses where "
        "it has are not counted or refused); a success is given back (0: no limit)",
    )
    signin_familiar_s: float = env(
        "PARLEY_SESSION_SIGNIN_FAMILIAR_S",
        30 * 86400.0,
        "Seconds an address stays familiar to an email after a good sign-in from it (PARLEY_SESSION_SIGNIN_PER_EMAIL "
        "does not count it)",
    )
    origins: str = env(
        "PARLEY_SESSION_ORIGINS",
        "",
        "Origins besides the gateway's own (comma-separated, as `https://chat.example.com`) whose pages may make "
        "cookie-authenticated writes",
    )
    hsts_s: int = env(
        "PARLEY_GATEWAY_HSTS_S",
        0,
        "Strict-Transport-Security max-age sent on every response; set it only where clients reach Parley over "
        "HTTPS (0: not sent)",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and value < 0:
                raise ConfigError(f"{f.metadata['env']} must be >= 0, got {value}")
        if self.idle_s <= 0 or self.max_s <= 0:
            raise ConfigError("PARLEY_SESSION_IDLE_S and PARLEY_SESSION_MAX_S must be positive")

    @property
    def allowed_origins(self) -> frozenset[str]:
        return frozenset(o.strip().rstrip("/").lower() for o in self.origins.split(",") if o.strip())


@dataclass(frozen=True)
class OidcSettings:
    """Sign-in with an organisation's OpenID Connect provider (gateway/oidc.py); off while the issuer is empty."""

    issuer: str = env(
        "PARLEY_OIDC_ISSUER", "", "The provider's issuer URL, exactly as its discovery document says it (empty: no OIDC sign-in)"
    )
    client_id: str = env("PARLEY_OIDC_CLIENT_ID", "", "Parley's client id at the provider")
    client_secret: str = env("PARLEY_OIDC_CLIENT_SECRET", "", "Parley's client secret at the provider (client_secret_basic)")
    org: str = env(
        "PARLEY_OIDC_ORG", "", "The organisation the provider's users sign in to; a first sign-in makes the user a member"
    )
    tier: str = env("PARLEY_OIDC_TIER", "free", "The tier of a user a first OIDC sign-in makes")
    scopes: str = env("PARLEY_OIDC_SCOPES", "openid email profile", "The scopes asked for (must include openid)")
    redirect_uri: str = env(
        "PARLEY_OIDC_REDIRECT_URI",
        "",
        "The callback URL registered at the provider (empty: this gateway's own /v1/auth/oidc/callback as the request "
        "reached it; set it behind a proxy that terminates TLS)",
    )
    timeout_s: float = env("PARLEY_OIDC_TIMEOUT_S", 10.0, "How long a call to the provider may take")

    def __post_init__(self) -> None:
        if not self.issuer:
            return
        missing = [f.metadata["env"] for f in fields(self) if f.name in ("client_id", "client_secret", "org") and not getattr(self, f.name)]
        if missing:
            raise ConfigError(f"PARLEY_OIDC_ISSUER is set: set {', '.join(missing)} too")
        if "openid" not in self.scopes.split():
            raise ConfigError(f"PARLEY_OIDC_SCOPES must include openid, got {self.scopes!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)
