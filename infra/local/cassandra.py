"""Apache Cassandra (one node) on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.policies import RoundRobinPolicy

from infra.local.jvm import HERE, JvmService, version_of
from infra.local.settings import LocalInfraSettings

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
    conf = svc.home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (svc.home / "logs").mkdir(parents=True, exist_ok=True)
    (conf / "cassandra.yaml").write_text(cassandra_yaml(cfg))
    (conf / "logback.xml").write_text(LOGBACK)
    return svc


def healthy(cfg: LocalInfraSettings) -> bool:
    """True once CQL answers on the native port."""
    cluster = Cluster(
        ["127.0.0.1"],
        port=cfg.cassandra_port,
        connect_timeout=1,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=RoundRobinPolicy())},
        protocol_version=5,
    )
    try:
        session = cluster.connect()
        session.execute("SELECT release_version FROM system.local", timeout=2)
        return True
    except (NoHostAvailable, OSError):
        return False
    except Exception:  # the driver raises assorted errors while the node boots: "not yet"
        return False
    finally:
        cluster.shutdown()


def log_file(cfg: LocalInfraSettings) -> Path:
    return cfg.data_dir / "cassandra" / "logs" / "system.log"

