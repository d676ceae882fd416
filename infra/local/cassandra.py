"""Apache Cassandra on loopback: one node on 127.0.0.1, or a replicated cluster of ``replicas`` nodes, one
per address of ``LocalInfraSettings.hosts``, on the same ports.

A cluster's nodes are all seeds and own evenly spaced tokens set in their config, with ``auto_bootstrap``
off: a new cluster has nothing to stream, so no node ever bootstraps, and they may start at once
(``infra.local.stack``); a node that restarts finds any live peer. Adding a node to a cluster that holds
data is not what this is for: it would need a bootstrap, one node at a time."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from cassandra import AuthenticationFailed, ConsistencyLevel, OperationTimedOut
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.policies import WhiteListRoundRobinPolicy

from infra.local import secure
from infra.local.jvm import HERE, InfraError, JvmService, version_of
from infra.local.settings import LocalInfraSettings
from parley.settings import CassandraSettings
from parley.transport_security import cassandra_options

POM = HERE / "cassandra.pom.xml"
MAIN = "org.apache.cassandra.service.CassandraDaemon"

# From conf/jvm17-server.options of the Cassandra source: what Java 17 must open to it.
JAVA17_ACCESS = (
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-exports=java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
)


def tag() -> str:
    return f"cassandra-{version_of(POM, 'cassandra.version')}"


def jmx_port(cfg: LocalInfraSettings, index: int = 0) -> int:
    """The local-only JMX port nodetool talks to (``infra.local.nodetool``): 7199, Cassandra's usual,
    beside the default storage port 7000, and another for a node started on other ports. JMX listens
    on 127.0.0.1 whatever the node's address, so each node of a replicated cluster has its own: 7200 + i."""
    return cfg.cassandra_storage_port + 199 + (1 + index if cfg.replicated else 0)


def node_name(cfg: LocalInfraSettings, index: int = 0) -> str:
    return f"cassandra-{index}" if cfg.replicated else "cassandra"


def service(cfg: LocalInfraSettings, index: int = 0) -> JvmService:
    home = cfg.home("cassandra", index)
    heap = cfg.replica_cassandra_heap if cfg.replicated else cfg.cassandra_heap
    return JvmService(
        name=node_name(cfg, index),
        pom=POM,
        main_class=MAIN,
        home=home,
        host=cfg.hosts[index],
        ports=(cfg.cassandra_port, cfg.cassandra_storage_port),
        loopback_ports=(jmx_port(cfg, index),),
        jvm_options=(
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-Xss256k",
            "-XX:+UseG1GC",
            "-XX:+ParallelRefProcEnabled",
            "-XX:MaxTenuringThreshold=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.net.preferIPv4Stack=true",
            "-Djdk.attach.allowAttachSelf=true",
            "-Dio.netty.tryReflectionSetAccessible=true",
            "-Dchronicle.analytics.disable=true",
            *JAVA17_ACCESS,
            "-Dcassandra-foreground=yes",
            f"-Dcassandra.config=file://{home / 'conf' / 'cassandra.yaml'}",
            f"-Dcassandra.storagedir={home / 'data'}",
            f"-Dcassandra.logdir={home / 'logs'}",
            f"-Dlogback.configurationFile={home / 'conf' / 'logback.xml'}",
            # Local nodes: skip the waits meant for real clusters.
            "-Dcassandra.superuser_setup_delay_ms=0",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.ring_delay_ms=0",
            # A single node's system tables skip the commit log, for fast starts. Not a cluster's: a node
            # killed there (bench.chaos) must come back with its host id and tokens, or it cannot rejoin;
            # nor a durable single node's (it is killed on purpose: its schema must survive that).
            *(() if cfg.replicated or cfg.cassandra_durable else ("-Dcassandra.unsafesystem=true",)),
            # JMX on 127.0.0.1 only, for nodetool (a flush before `parley audit erasure` reads the SSTables).
            f"-Dcassandra.jmx.local.port={jmx_port(cfg, index)}",
        ),
        classpath_first=(home / "conf",),
    )


def initial_token(cfg: LocalInfraSettings, index: int = 0) -> int:
    """Node ``index``'s token: evenly spaced around the Murmur3 ring, so each owns an equal range."""
    if not cfg.replicated:
        return 0
    return -(2**63) + index * (2**64 // cfg.replicas)


def cassandra_yaml(cfg: LocalInfraSettings, index: int = 0) -> str:
    host = cfg.hosts[index]
    seeds = ",".join(f"{h}:{cfg.cassandra_storage_port}" for h in cfg.hosts)
    # A cluster's write is acknowledged by a quorum: each node's share of it must outlive a SIGKILL,
    # so the commit log is synced before the acknowledgement (grouped for 10 ms), not every 10 s. A
    # SIGKILL loses what came after the last sync even though the bytes are in the page cache: replay
    # stops at the last sync marker (found by bench.chaos: a reply's completion acknowledged 240 ms
    # before a kill was gone). A single node syncs every 10 s unless it is to be killed (durable).
    commitlog = (
        "commitlog_sync: group\ncommitlog_sync_group_window: 10ms"
        if cfg.replicated or cfg.cassandra_durable
        else "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms"
    )
    memtable = "64MiB" if cfg.replicated else "128MiB"
    return f"""# Written by infra/local/cassandra.py; edits are overwritten on start.
cluster_name: parley-local
num_tokens: 1
initial_token: {initial_token(cfg, index)}
auto_bootstrap: false
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seeds}"
listen_address: {host}
rpc_address: {host}
storage_port: {cfg.cassandra_storage_port}
native_transport_port: {cfg.cassandra_port}
start_native_transport: true
{commitlog}
auto_snapshot: false
# A new cluster: use the 5.0 storage formats (vector search, SAI, BTI).
storage_compatibility_mode: NONE
# Small machine: fewer threads and smaller caches than the defaults.
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
concurrent_compactors: 1
memtable_heap_space: {memtable}
memtable_offheap_space: {memtable}
key_cache_size: 16MiB
{_security_yaml(cfg) if cfg.secure else ""}"""


def _security_yaml(cfg: LocalInfraSettings) -> str:
    """Secure mode: a login and a client certificate of the local CA from every client, TLS only on the
    native port (PEM files, no keystore)."""
    m = secure.material(cfg)
    return f"""authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
client_encryption_options:
  enabled: true
  optional: false
  require_client_auth: true
  keystore: {m.server}
  truststore: {m.ca}
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
"""


LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>${cassandra.logdir}/system.log.%i</fileNamePattern>
      <minIndex>1</minIndex><maxIndex>3</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>20MB</maxFileSize>
    </triggeringPolicy>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def prepare(cfg: LocalInfraSettings, lib: Path, index: int = 0) -> JvmService:
    svc = service(cfg, index)
    if cfg.secure:
        secure.ensure(cfg)
    conf = svc.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (svc.home / "logs").mkdir(parents=True, exist_ok=True)
    (conf / "cassandra.yaml").write_text(cassandra_yaml(cfg, index))
    (conf / "logback.xml").write_text(LOGBACK)
    return svc


def healthy(cfg: LocalInfraSettings, index: int = 0) -> bool:
    """True once node ``index`` answers CQL on its native port. Secure mode: over TLS, where a refused login
    is an answer too (the parley role exists only once ``ensure_role`` made it)."""
    _, settings = secure.client_settings(cfg)
    settings = replace(settings, hosts=cfg.hosts[index])
    try:
        _query(settings, "SELECT release_version FROM system.local")
        return True
    except NoHostAvailable as exc:
        return any(isinstance(e, AuthenticationFailed) for e in exc.errors.values())
    except Exception:  # the driver raises assorted errors while the node boots: "not yet"
        return False


#: The superuser a new Cassandra makes for itself, with its well-known password.
DEFAULT_ROLE = "cassandra"


def ensure_role(cfg: LocalInfraSettings) -> None:
    """Secure mode: the parley role is the node's only superuser. At the first start it is created by
    the default ``cassandra`` superuser, which it then drops (a node with a role never makes it again)."""
    _, parley = secure.client_settings(cfg)
    default = replace(parley, username=DEFAULT_ROLE, password=DEFAULT_ROLE, password_file="")
    deadline = time.monotonic() + cfg.start_timeout_s
    while True:
        try:
            _query(parley, f"DROP ROLE IF EXISTS {DEFAULT_ROLE}")
            return
        except NoHostAvailable as exc:
            if _timed_out(exc) and time.monotonic() < deadline:  # a node still busy booting: not yet
                time.sleep(0.5)
                continue
            if not any(isinstance(e, AuthenticationFailed) for e in exc.errors.values()):
                raise
        try:  # no parley role yet: the default superuser makes it
            create = f"CREATE ROLE IF NOT EXISTS {secure.USER} WITH PASSWORD = %s AND SUPERUSER = true AND LOGIN = true"
            _query(default, create, (parley.secret,))
        except NoHostAvailable as exc:  # the node sets its default role up a moment after it opens the port
            refused = any(isinstance(e, AuthenticationFailed) for e in exc.errors.values())
            if not refused and not _timed_out(exc):
                raise
            if time.monotonic() > deadline:
                raise InfraError(
                    f"Cassandra on 127.0.0.1:{cfg.cassandra_port} took neither the {secure.USER} role's password "
                    f"({parley.password_file}) nor the default superuser's: was its data made by another secure setup?"
                ) from exc
            time.sleep(0.5)


def _timed_out(exc: NoHostAvailable) -> bool:
    """Whether every host's error was a timeout (a node that opened its port but answers slowly)."""
    return bool(exc.errors) and all(isinstance(e, OperationTimedOut) for e in exc.errors.values())


def _query(settings: CassandraSettings, cql: str, values: tuple[object, ...] = ()) -> None:
    """One statement on a connection of its own, as ``settings`` log in (``NoHostAvailable`` when refused)."""
    cluster = Cluster(
        settings.contact_points,
        port=settings.port,
        connect_timeout=5,
        # Asked of these nodes only, never of a peer they gossip about (which may still be booting), and
        # answered by the node asked: its own system tables, and role statements that Cassandra itself
        # writes at the level its auth needs.
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=WhiteListRoundRobinPolicy(settings.contact_points), consistency_level=ConsistencyLevel.ONE
            )
        },
        protocol_version=5,
        **cassandra_options(settings),
    )
    try:
        session: Session = cluster.connect()
        session.execute(cql, values, timeout=5)
    finally:
        cluster.shutdown()


def log_file(cfg: LocalInfraSettings, index: int = 0) -> Path:
    return cfg.home("cassandra", index) / "logs" / "system.log"

