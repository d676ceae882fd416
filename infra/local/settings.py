"""The local stack's settings, beside the code that reads them: `parley` sits below and does not know how this machine runs its services."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parley.settings import REPO_ROOT, env


@dataclass(frozen=True)
class LocalInfraSettings:
    """Where and how `infra/local` runs Kafka and Cassandra on this machine."""

    data_dir: Path = env("PARLEY_DATA_DIR", REPO_ROOT / ".data", "Data, logs and pid files of local services")
    cache_dir: Path = env(
        "PARLEY_CACHE_DIR",
        Path("~/.cache/parley").expanduser(),
        "Jars fetched from Maven Central and the CPU engine's converted default model (outside the repo)",
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
    secure: bool = env(
        "PARLEY_INFRA_SECURE",
        False,
        "Kafka on SASL_SSL (SCRAM-SHA-512) and Cassandra with a password and TLS; generated keys and passwords "
        "under PARLEY_DATA_DIR/secure (docs/transport-security.md)",
    )
