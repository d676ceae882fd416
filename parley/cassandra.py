"""Cassandra sessions, with driver errors translated into ``StoreUnavailable``."""

from __future__ import annotations

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy

from parley.errors import StoreUnavailable
from parley.settings import CassandraSettings

#: Longest pause between attempts to reach a node that went down.
RECONNECT_MAX_S = 5.0


def connect(settings: CassandraSettings, keyspace: str | None = None, connect_timeout: float = 5.0) -> Session:
    """A session on ``keyspace`` (none: no keyspace). Close it with ``session.cluster.shutdown()``."""
    cluster = Cluster(
        settings.contact_points,
        port=settings.port,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=DCAwareRoundRobinPolicy(local_dc=settings.local_dc)
            )
        },
        connect_timeout=connect_timeout,
        protocol_version=5,
        # The driver's default backs off to 10 minutes between reconnection attempts: after an
        # outage of a minute, clients would stay down for minutes more. Cap it at a few seconds.
        reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=RECONNECT_MAX_S),
    )
    try:
        return cluster.connect(keyspace)
    except NoHostAvailable as exc:
        cluster.shutdown()
        raise StoreUnavailable(
            f"cannot reach Cassandra at {settings.hosts}:{settings.port} "
            "(PARLEY_CASSANDRA_HOSTS / PARLEY_CASSANDRA_PORT); is it running? `make run` starts a local one"
        ) from exc
