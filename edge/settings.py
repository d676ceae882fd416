"""Edge settings (env vars PARLEY_EDGE_*)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from urllib.parse import urlsplit

from parley.errors import ConfigError
from parley.settings import env


@dataclass(frozen=True)
class EdgeSettings:
    host: str = env("PARLEY_EDGE_HOST", "127.0.0.1", "Address the edge listens on")
    port: int = env("PARLEY_EDGE_PORT", 8080, "Port the edge listens on")
    gateways: str = env(
        "PARLEY_EDGE_GATEWAYS",
        "http://127.0.0.1:8000",
        "The gateways, comma separated, in shard order: the i-th of N must run with PARLEY_GATEWAY_SHARD=i/N",
    )
    health_s: float = env("PARLEY_EDGE_HEALTH_S", 1.0, "Seconds between readiness checks of each gateway (/readyz)")
    connect_timeout_s: float = env(
        "PARLEY_EDGE_CONNECT_TIMEOUT_S", 1.0, "Longest a connection to a gateway may take before the next one is tried"
    )
    max_body_bytes: int = env(
        "PARLEY_EDGE_MAX_BODY", 1024 * 1024, "Largest request body the edge holds (it keeps it to send again: 413 above)"
    )
    max_head_bytes: int = env("PARLEY_EDGE_MAX_HEAD", 64 * 1024, "Largest request or response head (431 / 502 above)")
    idle_s: float = env("PARLEY_EDGE_IDLE_S", 75.0, "A client connection idle between requests this long is closed")

    def __post_init__(self) -> None:
        self.addresses  # a malformed PARLEY_EDGE_GATEWAYS fails at start-up, naming itself
        for f in fields(self):
            if f.name in ("health_s", "connect_timeout_s", "idle_s") and getattr(self, f.name) <= 0:
                raise ConfigError(f"{f.metadata['env']} must be positive, got {getattr(self, f.name)}")

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of each gateway, in shard order."""
        out = []
        for url in (u.strip() for u in self.gateways.split(",")):
            if not url:
                continue
            parts = urlsplit(url if "://" in url else f"http://{url}")
            if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
                raise ConfigError(f"PARLEY_EDGE_GATEWAYS: {url!r} is not http://host:port")
            out.append((parts.hostname, parts.port or 80))
        if not out:
            raise ConfigError("PARLEY_EDGE_GATEWAYS names no gateway")
        return out
