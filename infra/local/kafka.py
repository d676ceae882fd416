"""Apache Kafka (KRaft, one combined broker + controller) on 127.0.0.1."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra.local.jvm import HERE, InfraError, JvmService, version_of
from infra.local.settings import LocalInfraSettings

POM = HERE / "kafka.pom.xml"
MAIN = "kafka.Kafka"


def tag() -> str:
    return f"kafka-{version_of(POM, 'kafka.version')}"


def service(cfg: LocalInfraSettings) -> JvmService:
    home = cfg.data_dir / "kafka"
    return JvmService(
        name="kafka",
        pom=POM,
        main_class=MAIN,
        home=home,
        ports=(cfg.kafka_port, cfg.kafka_controller_port, *([cfg.kafka_side_port] if cfg.kafka_side_port else [])),
        jvm_options=(
            f"-Xms{cfg.kafka_heap}",
            f"-Xmx{cfg.kafka_heap}",
            "-server",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={home / 'logs'}",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
        ),
        args=(str(home / "server.properties"),),
    )


def server_properties(cfg: LocalInfraSettings, home: Path) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.kafka_controller_port}"
    advertised = f"PLAINTEXT://127.0.0.1:{cfg.kafka_port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if cfg.kafka_side_port:
        # Clients that bootstrap here are told the broker is at the advertised port: a test's proxy
        # in front of it carries all their traffic, and only theirs.
        listeners += f",SIDE://127.0.0.1:{cfg.kafka_side_port}"
        advertised += f",SIDE://127.0.0.1:{cfg.kafka_side_advertised_port or cfg.kafka_side_port}"
        protocols += ",SIDE:PLAINTEXT"
    return f"""# Written by infra/local/kafka.py; edits are overwritten on start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cfg.kafka_controller_port}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocols}
log.dirs={home / 'data'}
# One node: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
# Topics are created by `parley topics` from the catalog, never by accident.
auto.create.topics.enable=false
# Tests and local runs join groups at once instead of waiting 3 s.
group.initial.rebalance.delay.ms=0
# The default dedupe buffer allocates 128 MiB for compaction; 2 MiB is plenty here.
log.cleaner.dedupe.buffer.size=2097152
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
"""


LOG4J2 = """status = warn
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {logs}/server.log
appender.file.filePattern = {logs}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def prepare(cfg: LocalInfraSettings, lib: Path) -> JvmService:
    """Write configs and format the storage once (KRaft needs a cluster id)."""
    svc = service(cfg)
    (svc.home / "logs").mkdir(parents=True, exist_ok=True)
    (svc.home / "server.properties").write_text(server_properties(cfg, svc.home))
    (svc.home / "log4j2.properties").write_text(LOG4J2.format(logs=svc.home / "logs"))
    if not (svc.home / "data" / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if cluster_id.startswith("-"):
            cluster_id = "A" + cluster_id[1:]
        result = subprocess.run(
            [
                "java",
                f"-Dlog4j2.configurationFile={svc.home / 'log4j2.properties'}",
                "-cp",
                f"{lib}/*",
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(svc.home / "server.properties"),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise InfraError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")
    return svc


def healthy(cfg: LocalInfraSettings) -> bool:
    """True once the broker answers a metadata request."""
    client = AdminClient(
        {"bootstrap.servers": f"127.0.0.1:{cfg.kafka_port}", "logger": _QUIET, "socket.timeout.ms": 1000}
    )
    try:
        return len(client.list_topics(timeout=1).brokers) > 0
    except KafkaException:
        return False


def log_file(cfg: LocalInfraSettings) -> Path:
    return cfg.data_dir / "kafka" / "logs" / "server.log"


_QUIET = logging.getLogger("parley.infra.kafka-probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
