"""Shared fixtures. Integration tests use the real Kafka and Cassandra of
infra/local, started once per run (reused if `make` already started them).
They fail, never skip, when that is impossible."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka import KafkaError, KafkaException

from infra.local.settings import LocalInfraSettings
from parley.settings import CassandraSettings, KafkaSettings, from_env


#: Every stack a run starts keeps its users' data keys in one keyspace, so this process's key service
#: opens what any of them sealed (parley/keys.py; set before any stack inherits the environment).
KEYS_KEYSPACE = os.environ.setdefault("PARLEY_KEYS_KEYSPACE", "test_keys")


@pytest.fixture(scope="session")
def infra() -> Iterator[LocalInfraSettings]:
    """Kafka and Cassandra up, and the key service installed in this process (as every service installs
    its own) on the run's shared keys keyspace, migrated."""
    from infra.local import stack
    from parley import keys
    from parley.cassandra import connect
    from parley.migrate import migrate
    from schemas import sealing

    cfg = from_env(LocalInfraSettings)
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    # pytest-xdist's workers each ask at once: one starts Kafka and Cassandra, the others then find them running.
    with open(cfg.data_dir / "infra.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stack.up(cfg, echo=lambda s: None)
    settings = from_env(CassandraSettings)
    session = connect(settings)
    migrate(session, KEYS_KEYSPACE, settings.replication)
    keys.install_from_env(session)
    yield cfg
    sealing.install(None)
    session.cluster.shutdown()


@pytest.fixture(scope="session")
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def kafka(infra: LocalInfraSettings, run_id: str, request: pytest.FixtureRequest) -> Iterator[KafkaSettings]:
    """Kafka settings with a topic prefix of this run and test module, all catalog topics created:
    a module never reads another module's records."""
    from parley.kafka import admin
    from parley.topics import ensure_topics

    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")[:20]
    settings = replace(from_env(KafkaSettings), topic_prefix=f"test-{run_id}-{module}.")
    client = admin(settings)
    ensure_topics(settings, client)
    yield settings
    names = [t for t in client.list_topics(timeout=10).topics if t.startswith(settings.topic_prefix)]
    if names:
        for fut in client.delete_topics(names, operation_timeout=30).values():
            try:
                fut.result()
            except KafkaException as exc:  # gone already (a test deleted it; the listing was older): what teardown wants
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise


@pytest.fixture(scope="session")
def cassandra_settings(infra: LocalInfraSettings, run_id: str) -> CassandraSettings:
    return replace(from_env(CassandraSettings), keyspace=f"test_{run_id}")


@pytest.fixture(scope="session")
def cassandra(cassandra_settings: CassandraSettings) -> Iterator:
    """A session on this run's keyspace, migrated; dropped at the end."""
    from parley.cassandra import connect
    from parley.migrate import migrate

    session = connect(cassandra_settings)
    migrate(session, cassandra_settings.keyspace, cassandra_settings.replication)
    yield session
    session.execute(f"DROP KEYSPACE IF EXISTS {cassandra_settings.keyspace}", timeout=60)
    session.cluster.shutdown()


#: make test's two pytest-xdist workers take whole groups: a test module (its module-scoped stack starts once),
#: or the whole browser package (its one web stack, package scope, on one worker). The groups are handed out in
#: the order below, so the short ones fill in at the end: the slowest first, as measured (tools/suite_times.py,
#: a clean run on two cores), then by directory. (pytest-xdist 3.8's own ``--dist loadgroup`` split marked
#: groups under pytest 9: this scheduler does the grouping instead.)
_SLOWEST = (
    "tests/browser",
    "tests/e2e/test_outages.py",
    "tests/integration/test_replication.py",
    "tests/e2e/test_routing.py",
    "tests/e2e/test_scaling.py",
    "tests/e2e/test_conversation_features.py",
    "tests/e2e/test_quotas.py",
    "tests/e2e/test_zombie_worker.py",
    "tests/e2e/test_transport_security.py",
    "tests/e2e/test_poison.py",
    "tests/e2e/test_observability.py",
    "tests/e2e/test_openai_clients.py",
    "tests/e2e/test_worker_crash.py",
    "tests/e2e/test_processor_crashes.py",
    "tests/e2e/test_gateway_shards.py",
    "tests/e2e/test_gateway_drain.py",
    "tests/e2e/test_analysts.py",
)
_THEN = ("tests/e2e/", "tests/integration/", "tests/unit/")


def _group(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return "tests/browser" if path.startswith("tests/browser/") else path


def _order(item: pytest.Item) -> int:
    group = _group(item.nodeid)
    if group in _SLOWEST:
        return _SLOWEST.index(group)
    return len(_SLOWEST) + next((i for i, prefix in enumerate(_THEN) if group.startswith(prefix)), len(_THEN))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_order)  # stable: a module's tests keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return ByGroup(config, log)
