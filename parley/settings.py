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


@dataclass(frozen=True)
class LocalInfraSettings:
    """Where and how `infra/local` runs Kafka and Cassandra on this machine."""

    data_dir: Path = env("PARLEY_DATA_DIR", REPO_ROOT / ".data", "Data, logs and pid files of local services")
    cache_dir: Path = env(
        "PARLEY_CACHE_DIR", Path("~/.cache/parley").expanduser(), "Jars fetched from Maven Central (outside the repo)"
    )
    kafka_port: int = env("PARLEY_KAFKA_PORT", 9092, "Local Kafka broker port")
    kafka_controller_port: int = env("PARLEY_KAFKA_CONTROLLER_PORT", 9093, "Local KRaft controller port")
    kafka_heap: str = env("PARLEY_KAFKA_HEAP", "512m", "Local Kafka JVM heap")
    kafka_side_port: int = env(
        "PARLEY_KAFKA_SIDE_PORT",
        0,
        "A second listener of the local Kafka (0: none), for tests that put one client behind a proxy",
    )
    kafka_side_advertised_port: int = env(
        "PARLEY_KAFKA_SIDE_ADVERTISED_PORT", 0, "Port the second listener advertises (the proxy's); 0: its own"
    )
    cassandra_port: int = env("PARLEY_CASSANDRA_PORT", 9042, "Local Cassandra native port")
    cassandra_storage_port: int = env("PARLEY_CASSANDRA_STORAGE_PORT", 7000, "Local Cassandra gossip port")
    cassandra_heap: str = env("PARLEY_CASSANDRA_HEAP", "1g", "Local Cassandra JVM heap")
    start_timeout_s: float = env("PARLEY_INFRA_TIMEOUT", 180.0, "Seconds to wait for a local service to be healthy")
