"""The local stack's settings, beside the code that reads them: `parley` sits below and does not know how this machine runs its services."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from parley.errors import ConfigError
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
    cassandra_durable: bool = env(
        "PARLEY_INFRA_CASSANDRA_DURABLE",
        False,
        "Sync a single Cassandra node's commit log before it acknowledges a write (group, 10 ms), as a replicated "
        "cluster always does. Off, a SIGKILL loses up to 10 s of acknowledged writes (replay stops at the last "
        "sync marker): on for a node that is killed on purpose (bench.chaos)",
    )
    start_timeout_s: float = env("PARLEY_INFRA_TIMEOUT", 180.0, "Seconds to wait for a local service to be healthy")
    secure: bool = env(
        "PARLEY_INFRA_SECURE",
        False,
        "Kafka on SASL_SSL (SCRAM-SHA-512) and Cassandra with a password and TLS; generated keys and passwords "
        "under PARLEY_DATA_DIR/secure (docs/transport-security.md)",
    )
    replicas: int = env(
        "PARLEY_INFRA_REPLICAS",
        1,
        "Kafka brokers and Cassandra nodes to run: 1 (on 127.0.0.1) or a replicated cluster of 2-9 of each, one "
        "per loopback address from PARLEY_INFRA_REPLICA_ADDRESS, under PARLEY_DATA_DIR/replicated",
    )
    replica_address: str = env(
        "PARLEY_INFRA_REPLICA_ADDRESS",
        "127.0.0.2",
        "First loopback address of a replicated cluster (node i listens on this + i, on the usual ports)",
    )
    replica_kafka_heap: str = env("PARLEY_INFRA_REPLICA_KAFKA_HEAP", "256m", "JVM heap of each broker of a replicated cluster")
    replica_cassandra_heap: str = env(
        "PARLEY_INFRA_REPLICA_CASSANDRA_HEAP", "512m", "JVM heap of each Cassandra node of a replicated cluster"
    )

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 9:
            raise ConfigError(f"PARLEY_INFRA_REPLICAS={self.replicas}: 1 (one node) or 2-9 (a replicated cluster)")
        if self.replicated:
            try:
                first = ipaddress.IPv4Address(self.replica_address)
            except ValueError:
                first = None
            if first is None or not (first.is_loopback and (first + self.replicas - 1).is_loopback):
                raise ConfigError(
                    f"PARLEY_INFRA_REPLICA_ADDRESS={self.replica_address!r}: the first of {self.replicas} IPv4 loopback addresses"
                )
            if first == ipaddress.IPv4Address("127.0.0.1"):
                raise ConfigError("PARLEY_INFRA_REPLICA_ADDRESS=127.0.0.1 is the single node's: start from 127.0.0.2")
            # Refused by name rather than half done: certificates name 127.0.0.1 only, and the brokers'
            # controller listener would need one per node.
            if self.secure:
                raise ConfigError("PARLEY_INFRA_SECURE is not supported with PARLEY_INFRA_REPLICAS > 1")
            if self.kafka_side_port:
                raise ConfigError("PARLEY_KAFKA_SIDE_PORT is not supported with PARLEY_INFRA_REPLICAS > 1")

    @property
    def replicated(self) -> bool:
        return self.replicas > 1

    @property
    def hosts(self) -> tuple[str, ...]:
        """The address of each node (index 0 first): 127.0.0.1 alone, or one loopback address per replica."""
        if not self.replicated:
            return ("127.0.0.1",)
        first = ipaddress.IPv4Address(self.replica_address)
        return tuple(str(first + i) for i in range(self.replicas))

    def home(self, name: str, index: int = 0) -> Path:
        """Where node ``index`` of ``name`` (kafka | cassandra) keeps its config, data, logs and pid file."""
        if not self.replicated:
            return self.data_dir / name
        return self.data_dir / "replicated" / f"{name}-{index}"
