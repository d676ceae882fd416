"""Edge settings (env vars PARLEY_EDGE_*). The body limits are the gateway's own (PARLEY_GATEWAY_MAX_BODY,
PARLEY_DOCUMENTS_MAX_BYTES): edge/config.py reads them, so the two never disagree."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
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
    idle_s: float = env("PARLEY_EDGE_IDLE_S", 75.0, "A client connection idle between requests this long is closed")
    silence_s: float = env(
        "PARLEY_EDGE_SILENCE_S",
        600.0,
        "Longest a request or response may pause mid-way (a stream pings every PARLEY_GATEWAY_PING_S; a "
        "non-streamed completion is silent until it ends)",
    )
    max_head_bytes: int = env("PARLEY_EDGE_MAX_HEAD", 32 * 1024, "Largest request or response head (HAProxy's buffer)")
    tls_cert: str = env("PARLEY_EDGE_TLS_CERT", "", "PEM certificate chain: set, the edge serves HTTPS with HTTP/2 and HTTP/1.1")
    tls_key: str = env("PARLEY_EDGE_TLS_KEY", "", "PEM private key of PARLEY_EDGE_TLS_CERT (empty: it is in the certificate's file)")
    haproxy: str = env("PARLEY_EDGE_HAPROXY", "/usr/sbin/haproxy", "The HAProxy binary (Debian's: infra/local/debian-packages.sh)")

    def __post_init__(self) -> None:
        self.addresses  # a malformed PARLEY_EDGE_GATEWAYS fails at start-up, naming itself
        for f in fields(self):
            if f.name.endswith("_s") and getattr(self, f.name) <= 0:
                raise ConfigError(f"{f.metadata['env']} must be positive, got {getattr(self, f.name)}")
        if self.max_head_bytes < 4096:
            raise ConfigError(f"PARLEY_EDGE_MAX_HEAD must be at least 4096, got {self.max_head_bytes}")
        if self.tls_key and not self.tls_cert:
            raise ConfigError("PARLEY_EDGE_TLS_KEY is set without PARLEY_EDGE_TLS_CERT")
        for setting, path in (("PARLEY_EDGE_TLS_CERT", self.tls_cert), ("PARLEY_EDGE_TLS_KEY", self.tls_key)):
            if path and not Path(path).is_file():
                raise ConfigError(f"{setting}={path!r} is not a readable file")

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
