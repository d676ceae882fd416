"""An isolated Parley on a shared Kafka + Cassandra: prefixed topics, its own keyspace,
every service of the topology as a child process on free ports.

The e2e tests and the benchmarks use it, so what they measure is the real stack,
started the way `parley run` starts it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from parley.cassandra import connect
from parley.kafka import admin
from parley.migrate import migrate
from parley.settings import CassandraSettings, KafkaSettings, from_env
from parley.topics import ensure_topics
from parley.keys import KeySettings
from parley.users import create_user
from tools.supervisor import Child, Supervisor, free_port
from tools.topology import EDGE, ENGINE, GATEWAY, SERVICES, Service


#: A Cassandra just started, on a two-core machine busy with other stacks, can take longer than the driver's
#: usual 5 s to answer a new connection (test_outages' private one did).
CONNECT_TIMEOUT_S = 30.0


@dataclass
class IsolatedStack:
    url: str
    engine_url: str
    kafka: KafkaSettings
    cassandra: CassandraSettings
    supervisor: Supervisor
    session: object  # a Cassandra session on the keyspace
    #: With ``start(gateways=N)``, N > 1: each sharded gateway's own URL, in shard order (``url`` is the edge's).
    gateway_urls: list[str] = field(default_factory=list)

    def create_user(self, name: str = "user", tier: str = "plus") -> tuple[str, str]:
        return create_user(self.session, name, tier)  # type: ignore[arg-type]

    def metrics_url(self, name: str = GATEWAY.name) -> str:
        """Where the child named ``name`` (the last started of that name) serves /metrics: its own port."""
        child = next(c for c in reversed(self.supervisor.children) if c.log.stem == name)
        return str(child.metrics_url)

    def stop(self) -> None:
        self.supervisor.stop_all()
        self.session.cluster.shutdown()  # type: ignore[attr-defined]  # else its scheduler thread outlives the test run


def prepare(kafka: KafkaSettings, cassandra: CassandraSettings, name: str) -> tuple[KafkaSettings, CassandraSettings]:
    """Settings of a fresh namespace: topics created under a prefix, keyspace migrated."""
    run = uuid.uuid4().hex[:8]
    kafka = replace(kafka, topic_prefix=f"{name}-{run}.")
    cassandra = replace(cassandra, keyspace=f"{name}_{run}")
    ensure_topics(kafka, admin(kafka))
    session = connect(cassandra, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        migrate(session, cassandra.keyspace, cassandra.replication)
        shared_keys = from_env(KeySettings).keyspace  # the run's one keys keyspace (tests/conftest.py), on this Cassandra too
        if shared_keys:
            migrate(session, shared_keys, cassandra.replication)
    finally:
        session.cluster.shutdown()
    return kafka, cassandra


def start(
    kafka: KafkaSettings,
    cassandra: CassandraSettings,
    log_dir: Path,
    env: dict[str, str] | None = None,
    services: tuple[Service, ...] = SERVICES,
    gateways: int = 1,
) -> IsolatedStack:
    """The stack; ``gateways`` > 1: that many sharded gateways (``PARLEY_GATEWAY_SHARD`` i/N) behind an edge,
    whose URL is the stack's ``url``."""
    sharded = gateways > 1 and GATEWAY in services
    if sharded:
        services = tuple(s for s in services if s is not GATEWAY)
    engine_port, gateway_port = free_port(), free_port()
    base = {
        "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
        # Groups of their own too: a member of another stack's group would rebalance this one's.
        "PARLEY_STREAMS_GROUP_PREFIX": kafka.topic_prefix,
        "PARLEY_CASSANDRA_HOSTS": cassandra.hosts,
        "PARLEY_CASSANDRA_PORT": str(cassandra.port),
        "PARLEY_KEYSPACE": cassandra.keyspace,
        "PARLEY_ENGINE_PORT": str(engine_port),
        "PARLEY_WORKER_ENGINE_URLS": f"http://127.0.0.1:{engine_port}",
        # The small pool's engine also writes summaries and titles: this stack's own, never a neighbour's.
        "PARLEY_CONTEXT_SUMMARY_URL": f"http://127.0.0.1:{engine_port}",
        "PARLEY_TITLER_ENGINE_URL": f"http://127.0.0.1:{engine_port}",
        "PARLEY_GATEWAY_PORT": str(gateway_port),
        "PARLEY_STREAMS_DATADIR": str(log_dir / "faust"),
        # Most stacks here never search a document: the context builder loads the embedding model (torch, ~12
        # CPU-seconds) only if a question needs it. Stacks that search documents set it back to true.
        "PARLEY_DOCUMENTS_EMBEDDER_WARM": "false",
    }
    supervisor = Supervisor(log_dir, {**base, **(env or {})}, ports={"engine_port": engine_port, "gateway_port": gateway_port})
    try:
        supervisor.start_all(services, echo=lambda s: None)
    except BaseException:
        supervisor.stop_all()
        raise
    stack = IsolatedStack(
        f"http://127.0.0.1:{gateway_port}",
        f"http://127.0.0.1:{engine_port}",
        kafka,
        cassandra,
        supervisor,
        connect(cassandra, cassandra.keyspace, connect_timeout=CONNECT_TIMEOUT_S),
    )
    if sharded:
        try:
            stack.gateway_urls = [add_gateway(stack, f"gateway-{i}", f"{i}/{gateways}")[1] for i in range(gateways)]
            stack.url = add_edge(stack, stack.gateway_urls)[1]
        except BaseException:
            stack.stop()
            raise
    return stack


def add_gateway(stack: IsolatedStack, name: str, shard: str = "", extra_env: dict[str, str] | None = None) -> tuple[Child, str]:
    """Another gateway process on the stack, on a free port (``shard``: its PARLEY_GATEWAY_SHARD); (child, URL)."""
    port = free_port()
    env = {"PARLEY_GATEWAY_PORT": str(port), "PARLEY_GATEWAY_SHARD": shard, **(extra_env or {})}
    child = stack.supervisor.start(GATEWAY, name=name, extra_env=env, ports={"gateway_port": port})
    stack.supervisor.wait_ready(child)
    return child, f"http://127.0.0.1:{port}"


def add_edge(stack: IsolatedStack, gateway_urls: list[str], name: str = "edge") -> tuple[Child, str]:
    """An edge in front of ``gateway_urls`` (in shard order), on a free port; (child, URL)."""
    port = free_port()
    env = {"PARLEY_EDGE_PORT": str(port), "PARLEY_EDGE_GATEWAYS": ",".join(gateway_urls), "PARLEY_EDGE_HEALTH_S": "0.5"}
    child = stack.supervisor.start(EDGE, name=name, extra_env=env, ports={"edge_port": port})
    stack.supervisor.wait_ready(child)
    return child, f"http://127.0.0.1:{port}"


def add_worker(
    stack: IsolatedStack,
    worker: Service,
    worker_id: str,
    extra_env: dict[str, str] | None = None,
    engine_env: dict[str, str] | None = None,
    engines: int = 1,
) -> tuple[Child, Child]:
    """``engines`` more engines (free ports) and one worker fronting them: replicas of ``worker``'s pool.

    With several engines the worker runs one group member per engine, ``<worker_id>.<n>``.
    ``engine_env`` is the engines' own settings over the stack's (another backend, say).
    Returns the first engine and the worker."""
    started: list[Child] = []
    urls: list[str] = []
    for n in range(engines):
        port = free_port()
        name = f"engine-{worker_id}" if engines == 1 else f"engine-{worker_id}.{n}"
        started.append(
            stack.supervisor.start(
                ENGINE, name=name, extra_env={**(engine_env or {}), "PARLEY_ENGINE_PORT": str(port)},
                ports={"engine_port": port},
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    for engine in started:
        stack.supervisor.wait_ready(engine)
    env = {"PARLEY_WORKER_ENGINE_URLS": ",".join(urls), "PARLEY_WORKER_ID": worker_id, **(extra_env or {})}
    child = stack.supervisor.start(worker, name=worker_id, extra_env=env)
    stack.supervisor.wait_ready(child)
    return started[0], child


def drop(kafka: KafkaSettings, cassandra: CassandraSettings) -> None:
    """Delete the namespace's topics and keyspace."""
    client = admin(kafka)
    names = [t for t in client.list_topics(timeout=10).topics if kafka.topic_prefix and t.startswith(kafka.topic_prefix)]
    if names:
        for fut in client.delete_topics(names, operation_timeout=30).values():
            fut.result()
    session = connect(cassandra, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {cassandra.keyspace}", timeout=60)
    finally:
        session.cluster.shutdown()
