"""Apache Cassandra (one node) on 127.0.0.1."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from cassandra import AuthenticationFailed, OperationTimedOut
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.policies import RoundRobinPolicy

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


def jmx_port(cfg: LocalInfraSettings) -> int:
    """The local-only JMX port nodetool talks to (``infra.local.nodetool``): 7199, Cassandra's usual,
    beside the default storage port 7000, and another for a node started on other ports."""
    return cfg.cassandra_storage_port + 199


def service(cfg: LocalInfraSettings) -> JvmService:
    home = cfg.data_dir / "cassandra"
    return JvmService(
        name="cassandra",
        pom=POM,
        main_class=MAIN,
        home=home,
        ports=(cfg.cassandra_port, cfg.cassandra_storage_port, jmx_port(cfg)),
        jvm_options=(
            f"-Xms{cfg.cassandra_heap}",
            f"-Xmx{cfg.cassandra_heap}",
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
            # Local single node: skip the waits meant for real clusters.
            "-Dcassandra.unsafesystem=true",
            "-Dcassandra.superuser_setup_delay_ms=0",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.ring_delay_ms=0",
            # JMX on 127.0.0.1 only, for nodetool (a flush before `parley audit erasure` reads the SSTables).
            f"-Dcassandra.jmx.local.port={jmx_port(cfg)}",
        ),
        classpath_first=(home / "conf",),
    )


def cassandra_yaml(cfg: LocalInfraSettings) -> str:
    return f"""# Written by infra/local/cassandra.py; edits are overwritten on start.
cluster_name: parley-local
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:{cfg.cassandra_storage_port}"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: {cfg.cassandra_storage_port}
native_transport_port: {cfg.cassandra_port}
start_native_transport: true
commitlog_sync: periodic
commitlog_sync_period: 10000ms
auto_snapshot: false
# A new cluster: use the 5.0 storage formats (vector search, SAI, BTI).
storage_compatibility_mode: NONE
# Small machine: fewer threads and smaller caches than the defaults.
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
concurrent_compactors: 1
memtable_heap_space: 128MiB
memtable_offheap_space: 128MiB
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


def prepare(cfg: LocalInfraSettings, lib: Path) -> JvmService:
    svc = service(cfg)
    if cfg.secure:
        secure.ensure(cfg)
    conf = svc.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (svc.home / "logs").mkdir(parents=True, exist_ok=True)
    (conf / "cassandra.yaml").write_text(cassandra_yaml(cfg))
    (conf / "logback.xml").write_text(LOGBACK)
    return svc


def healthy(cfg: LocalInfraSettings) -> bool:
    """True once CQL answers on the native port. Secure mode: over TLS, where a refused login is an answer
    too (the parley role exists only once ``ensure_role`` made it)."""
    _, settings = secure.client_settings(cfg)
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
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy())},
        protocol_version=5,
        **cassandra_options(settings),
    )
    try:
        session: Session = cluster.connect()
        session.execute(cql, values, timeout=5)
    finally:
        cluster.shutdown()


def log_file(cfg: LocalInfraSettings) -> Path:
    return cfg.data_dir / "cassandra" / "logs" / "system.log"

