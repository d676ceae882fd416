"""Typed settings, read from the environment at start-up (never at import).

Every setting names its environment variable and has a default that works on a
developer machine, so the same code points at a real cluster by changing env
vars only. Each service builds the one settings object it needs with
``from_env()``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from parley.errors import ConfigError

T = TypeVar("T")

#: Repository root: `.data/` (local infra state) lives under it.
REPO_ROOT = Path(__file__).resolve().parent.parent


def env(name: str, default: Any, doc: str, *, secret: bool = False) -> Any:
    """Declare a setting: its environment variable, default and meaning. A ``secret`` (a password) is left
    out of the settings object's repr, and its metadata says so to whatever prints settings."""
    return field(default=default, repr=not secret, metadata={"env": name, "doc": doc, "secret": secret})


def _coerce(raw: str, like: Any) -> Any:
    if isinstance(like, bool):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(like, int):
        return int(raw)
    if isinstance(like, float):
        return float(raw)
    if isinstance(like, Path):
        return Path(raw).expanduser()
    return raw


#: Settings that were renamed or removed → what to set instead. Still set, they stop the process:
#: a deployment's old name must not be silently ignored.
RETIRED = {
    "PARLEY_WORKER_ENGINE_URL": "PARLEY_WORKER_ENGINE_URLS (a comma-separated list of engines)",
    "PARLEY_EDGE_MAX_BODY": "PARLEY_GATEWAY_MAX_BODY and PARLEY_DOCUMENTS_MAX_BYTES (the edge applies the gateway's own limits)",
}


def from_env(cls: type[T], environ: dict[str, str] | None = None) -> T:
    """Build ``cls`` from the environment; unset variables keep their default, retired ones are refused."""
    source = os.environ if environ is None else environ
    for old, instead in RETIRED.items():
        if old in source:
            raise ConfigError(f"{old} is no longer read: set {instead}")
    values = {}
    for f in fields(cls):  # type: ignore[arg-type]
        name = f.metadata["env"]
        if name in source:
            try:
                values[f.name] = _coerce(source[name], f.default)
            except ValueError as exc:
                raise ValueError(f"{name}={source[name]!r} is not a valid {type(f.default).__name__}") from exc
    return cls(**values)


def describe(cls: type) -> list[tuple[str, Any, str]]:
    """(env var, default, doc) for every setting of ``cls``: for docs and `--help`. A secret's default
    is never shown (it is empty; the marker says so even if one ever is not)."""
    return [(f.metadata["env"], "(secret)" if f.metadata.get("secret") else f.default, f.metadata["doc"]) for f in fields(cls)]


@dataclass(frozen=True)
class TelemetrySettings:
    """Logs and metrics, the same for every process."""

    log_level: str = env("PARLEY_LOG_LEVEL", "INFO", "Level of the JSON logs on stderr (DEBUG, INFO, WARNING, ERROR)")
    metrics_port: int = env(
        "PARLEY_METRICS_PORT", 0, "Port of a process's /metrics (0: off; the supervisor hands each child one)"
    )
    metrics_host: str = env("PARLEY_METRICS_HOST", "127.0.0.1", "Address that /metrics listens on")


#: What ``PARLEY_KAFKA_SECURITY_PROTOCOL`` may say (librdkafka's and Kafka's names).
KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms Parley's clients speak: SCRAM only (PLAIN would send the password itself).
KAFKA_SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str = env("PARLEY_KAFKA_BOOTSTRAP", "127.0.0.1:9092", "Kafka bootstrap servers (host:port,...)")
    replication: int = env("PARLEY_KAFKA_REPLICATION", 1, "Replication factor of topics Parley creates")
    topic_prefix: str = env(
        "PARLEY_TOPIC_PREFIX", "", "Prefix for every topic name, to run isolated stacks on one cluster"
    )
    security_protocol: str = env(
        "PARLEY_KAFKA_SECURITY_PROTOCOL",
        "PLAINTEXT",
        "How every client reaches the brokers: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (production: SASL_SSL)",
    )
    sasl_mechanism: str = env(
        "PARLEY_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", "SASL mechanism with SASL_*: SCRAM-SHA-256 or SCRAM-SHA-512"
    )
    sasl_username: str = env("PARLEY_KAFKA_SASL_USERNAME", "", "SASL user of every client (with SASL_*)")
    sasl_password: str = env(
        "PARLEY_KAFKA_SASL_PASSWORD", "", "That user's password (or PARLEY_KAFKA_SASL_PASSWORD_FILE)", secret=True
    )
    sasl_password_file: str = env(
        "PARLEY_KAFKA_SASL_PASSWORD_FILE", "", "A file holding that password (a mounted secret), read at start"
    )
    ssl_ca: str = env(
        "PARLEY_KAFKA_SSL_CA", "", "PEM file of the CA(s) the brokers' certificates chain to (empty: the system's)"
    )
    ssl_cert: str = env(
        "PARLEY_KAFKA_SSL_CERT", "", "PEM file of this client's certificate, for brokers that require client TLS"
    )
    ssl_key: str = env("PARLEY_KAFKA_SSL_KEY", "", "PEM file of that certificate's private key (unencrypted)")

    def __post_init__(self) -> None:
        protocol = self.security_protocol
        if protocol not in KAFKA_SECURITY_PROTOCOLS:
            raise ConfigError(
                f"PARLEY_KAFKA_SECURITY_PROTOCOL={protocol!r} is not one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}"
            )
        if self.uses_sasl:
            if self.sasl_mechanism not in KAFKA_SASL_MECHANISMS:
                raise ConfigError(
                    f"PARLEY_KAFKA_SASL_MECHANISM={self.sasl_mechanism!r} is not one of {', '.join(KAFKA_SASL_MECHANISMS)}"
                )
            if not self.sasl_username:
                raise ConfigError(f"PARLEY_KAFKA_SECURITY_PROTOCOL={protocol} needs PARLEY_KAFKA_SASL_USERNAME")
        else:
            sasl = _given(self, "sasl_username", "sasl_password", "sasl_password_file")
            _unused(sasl, because=f"PARLEY_KAFKA_SECURITY_PROTOCOL={protocol} uses no SASL")
        _password(_given(self, "sasl_username", "sasl_password", "sasl_password_file"))
        if not self.uses_tls:
            _unused(_given(self, *_PEM), because=f"PARLEY_KAFKA_SECURITY_PROTOCOL={protocol} uses no TLS")
        _pem_files(_given(self, *_PEM))

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl_secret(self) -> str:
        """The SASL password: PARLEY_KAFKA_SASL_PASSWORD, or what its file holds."""
        return _read_secret(self.sasl_password, self.sasl_password_file)

    def topic(self, name: str) -> str:
        """The physical topic name for a catalog name."""
        return f"{self.topic_prefix}{name}"


@dataclass(frozen=True)
class CassandraSettings:
    hosts: str = env("PARLEY_CASSANDRA_HOSTS", "127.0.0.1", "Cassandra contact points (comma separated)")
    port: int = env("PARLEY_CASSANDRA_PORT", 9042, "Cassandra native protocol port")
    keyspace: str = env("PARLEY_KEYSPACE", "parley", "Keyspace holding Parley's tables")
    replication: str = env(
        "PARLEY_CASSANDRA_REPLICATION",
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        "Replication map used when the keyspace is created",
    )
    local_dc: str = env("PARLEY_CASSANDRA_DC", "datacenter1", "Local data centre for the load-balancing policy")
    username: str = env("PARLEY_CASSANDRA_USERNAME", "", "Role every client logs in as (empty: no login)")
    password: str = env(
        "PARLEY_CASSANDRA_PASSWORD", "", "That role's password (or PARLEY_CASSANDRA_PASSWORD_FILE)", secret=True
    )
    password_file: str = env(
        "PARLEY_CASSANDRA_PASSWORD_FILE", "", "A file holding that password (a mounted secret), read at start"
    )
    ssl: bool = env("PARLEY_CASSANDRA_SSL", False, "Speak TLS to Cassandra's native port (client_encryption_options)")
    ssl_ca: str = env(
        "PARLEY_CASSANDRA_SSL_CA", "", "PEM file of the CA(s) the nodes' certificates chain to (empty: the system's)"
    )
    ssl_cert: str = env(
        "PARLEY_CASSANDRA_SSL_CERT", "", "PEM file of this client's certificate, for nodes that require client TLS"
    )
    ssl_key: str = env("PARLEY_CASSANDRA_SSL_KEY", "", "PEM file of that certificate's private key (unencrypted)")
    ssl_server_name: str = env(
        "PARLEY_CASSANDRA_SSL_SERVER_NAME",
        "",
        "The name every node's certificate is checked against (empty: the address dialled). Set it where the "
        "driver dials discovered nodes by IP but their certificates name a DNS name (K8ssandra, cert-manager)",
    )

    def __post_init__(self) -> None:
        if not self.username:
            _unused(_given(self, "password", "password_file"), because="PARLEY_CASSANDRA_USERNAME is empty (no login)")
        _password(_given(self, "username", "password", "password_file"))
        if not self.ssl:
            _unused(_given(self, *_PEM, "ssl_server_name"), because="PARLEY_CASSANDRA_SSL is off")
        _pem_files(_given(self, *_PEM))

    @property
    def secret(self) -> str:
        """The role's password: PARLEY_CASSANDRA_PASSWORD, or what its file holds."""
        return _read_secret(self.password, self.password_file)

    @property
    def contact_points(self) -> list[str]:
        return [h.strip() for h in self.hosts.split(",") if h.strip()]


# ------------------------------------------------------- checks of the transport settings (fail at start)

_PEM = ("ssl_ca", "ssl_cert", "ssl_key")


def _given(settings: Any, *names: str) -> dict[str, Any]:
    """{environment variable: value} of the fields ``names`` of ``settings``, in that order."""
    env_of = {f.name: f.metadata["env"] for f in fields(settings)}
    return {env_of[name]: getattr(settings, name) for name in names}


def _unused(given: dict[str, str], *, because: str) -> None:
    """Settings given that the rest leaves unused: a half-done configuration, said at start, not found in traffic."""
    for name, value in given.items():
        if value:
            raise ConfigError(f"{name} is set, but {because}: complete the configuration or unset {name}")


def _password(login: dict[str, str]) -> None:
    """A user name needs one password: given itself, or in a file that is there."""
    (user_var, user), (password_var, password), (file_var, path) = login.items()
    if password and path:
        raise ConfigError(f"both {password_var} and {file_var} are set; keep one")
    if user and not (password or path):
        raise ConfigError(f"{user_var} needs {password_var} or {file_var}")
    if path and not Path(path).is_file():
        raise ConfigError(f"{file_var}={path!r} is not a readable file")


def _pem_files(pem: dict[str, str]) -> None:
    """A certificate goes with its key, and every file named is there."""
    (_, _), (cert_var, cert), (key_var, key) = pem.items()
    if bool(cert) != bool(key):
        raise ConfigError(f"{cert_var} and {key_var} go together: set both or neither")
    for var, path in pem.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"{var}={path!r} is not a readable file")


def _read_secret(value: str, path: str) -> str:
    return Path(path).read_text().strip() if path else value
