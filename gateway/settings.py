"""Gateway settings (env vars PARLEY_GATEWAY_*)."""

from __future__ import annotations

from dataclasses import dataclass

from parley.settings import env


@dataclass(frozen=True)
class GatewaySettings:
    host: str = env("PARLEY_GATEWAY_HOST", "127.0.0.1", "Address the gateway listens on")
    port: int = env("PARLEY_GATEWAY_PORT", 8000, "Port the gateway listens on")
    max_body_bytes: int = env("PARLEY_GATEWAY_MAX_BODY", 256 * 1024, "Largest request body accepted (413 above)")
    max_message_chars: int = env("PARLEY_GATEWAY_MAX_MESSAGE_CHARS", 32_000, "Longest message text (413 above)")
    auth_cache_s: float = env("PARLEY_GATEWAY_AUTH_CACHE_S", 30.0, "Seconds an API key lookup is cached")
    stream_ping_s: float = env("PARLEY_GATEWAY_PING_S", 15.0, "SSE keep-alive comment interval")
    append_timeout_s: float = env(
        "PARLEY_GATEWAY_APPEND_TIMEOUT_S", 10.0, "How long to wait for Kafka to acknowledge an append before 503"
    )
    abandon_grace_s: float = env(
        "PARLEY_GATEWAY_ABANDON_GRACE_S", 60.0, "A reply nobody reads for this long is cancelled (reason abandoned)"
    )
    retry_after_s: int = env("PARLEY_GATEWAY_RETRY_AFTER_S", 5, "Retry-After sent with 503 when Kafka is unavailable")
