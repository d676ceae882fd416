"""The whole stack as real processes (engine, worker, processors, gateway) on this run's
topics and keyspace, started once for the e2e tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from parley.client import ParleyClient
from parley.settings import CassandraSettings, KafkaSettings
from parley.supervisor import Supervisor
from parley.topology import SERVICES
from parley.users import create_user


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    url: str
    key: str
    user_id: str
    kafka: KafkaSettings
    cassandra: CassandraSettings
    supervisor: Supervisor

    def client(self, key: str | None = None) -> ParleyClient:
        return ParleyClient(self.url, key or self.key)

    def new_user(self, session, tier: str = "free") -> str:
        return create_user(session, "e2e", tier)[1]


@pytest.fixture(scope="session")
def stack(kafka: KafkaSettings, cassandra, cassandra_settings: CassandraSettings, tmp_path_factory) -> Iterator[Stack]:
    engine_port, gateway_port = free_port(), free_port()
    env = {
        "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
        "PARLEY_CASSANDRA_HOSTS": cassandra_settings.hosts,
        "PARLEY_CASSANDRA_PORT": str(cassandra_settings.port),
        "PARLEY_KEYSPACE": cassandra_settings.keyspace,
        "PARLEY_ENGINE_PORT": str(engine_port),
        "PARLEY_ENGINE_BACKEND": "synthetic",
        "PARLEY_WORKER_ENGINE_URL": f"http://127.0.0.1:{engine_port}",
        "PARLEY_GATEWAY_PORT": str(gateway_port),
    }
    log_dir: Path = tmp_path_factory.mktemp("stack-logs")
    supervisor = Supervisor(log_dir, env, ports={"engine_port": engine_port, "gateway_port": gateway_port})
    try:
        supervisor.start_all(SERVICES, echo=lambda s: None)
        user_id, key = create_user(cassandra, "e2e-user", "plus")
        yield Stack(f"http://127.0.0.1:{gateway_port}", key, user_id, kafka, cassandra_settings, supervisor)
    finally:
        supervisor.stop_all()


def run(coro):
    return asyncio.run(coro)
