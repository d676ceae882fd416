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

T = TypeVar("T")

#: Repository root: `.data/` (local infra state) lives under it.
REPO_ROOT = Path(__file__).resolve().parent.parent


def env(name: str, default: Any, doc: str) -> Any:
    """Declare a setting: its environment variable, default and meaning."""
    return field(default=default, metadata={"env": name, "doc": doc})


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


def from_env(cls: type[T], environ: dict[str, str] | None = None) -> T:
    """Build ``cls`` from the environment; unset variables keep their default."""
    source = os.environ if environ is None else environ
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
    """(env var, default, doc) for every setting of ``cls``: for docs and `--help`."""
    return [(f.metadata["env"], f.default, f.metadata["doc"]) for f in fields(cls)]


@dataclass(frozen=True)
class TelemetrySettings:
    """Logs and metrics, the same for every process."""

    log_level: str = env("PARLEY_LOG_LEVEL", "INFO", "Level of the JSON logs on stderr (DEBUG, INFO, WARNING, ERROR)")
    metrics_port: int = env(
        "PARLEY_METRICS_PORT", 0, "Port of a process's /metrics (0: off; the supervisor hands each child one)"
    )
    metrics_host: str = env("PARLEY_METRICS_HOST", "127.0.0.1", "Address that /metrics listens on")


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str = env("PARLEY_KAFKA_BOOTSTRAP", "127.0.0.1:9092", "Kafka bootstrap servers (host:port,...)")
    replication: int = env("PARLEY_KAFKA_REPLICATION", 1, "Replication factor of topics Parley creates")
    topic_prefix: str = env(
        "PARLEY_TOPIC_PREFIX", "", "Prefix for every topic name, to run isolated stacks on one cluster"
    )

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

    @property
    def contact_points(self) -> list[str]:
        return [h.strip() for h in self.hosts.split(",") if h.strip()]
