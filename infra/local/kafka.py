"""Apache Kafka (KRaft) on loopback: one combined broker + controller on 127.0.0.1, or a replicated cluster
of ``replicas`` combined nodes, one per address of ``LocalInfraSettings.hosts``, whose controllers form
the quorum (a majority of them must run for any metadata change, an ISR shrink included)."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra.local import secure
from infra.local.jvm import HERE, InfraError, JvmService, version_of
from infra.local.settings import LocalInfraSettings
from parley.topics import min_insync_replicas, replication_factor
from parley.transport_security import kafka_config

POM = HERE / "kafka.pom.xml"
MAIN = "kafka.Kafka"


def tag() -> str:
    return f"kafka-{version_of(POM, 'kafka.version')}"


def node_name(cfg: LocalInfraSettings, index: int = 0) -> str:
    return f"kafka-{index}" if cfg.replicated else "kafka"


def service(cfg: LocalInfraSettings, index: int = 0) -> JvmService:
    home = cfg.home("kafka", index)
    heap = cfg.replica_kafka_heap if cfg.replicated else cfg.kafka_heap
    return JvmService(
        name=node_name(cfg, index),
        host=cfg.hosts[index],
        pom=POM,
        main_class=MAIN,
        home=home,
        ports=(cfg.kafka_port, cfg.kafka_controller_port, *([cfg.kafka_side_port] if cfg.kafka_side_port else [])),
        jvm_options=(
            f"-Xms{heap}",
            f"-Xmx{heap}",
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


def server_properties(cfg: LocalInfraSettings, home: Path, index: int = 0) -> str:
    # Secure mode: the clients' listener is SASL_SSL (the broker logs in to itself there as the
    # parley user), the controller's TLS; both take only clients with a certificate of the local CA.
    client = "SASL_SSL" if cfg.secure else "PLAINTEXT"
    host = cfg.hosts[index]
    listeners = f"{client}://{host}:{cfg.kafka_port},CONTROLLER://{host}:{cfg.kafka_controller_port}"
    advertised = f"{client}://{host}:{cfg.kafka_port}"
    if cfg.replicated:  # every node a voter: the quorum survives any one of them
        voters = ",".join(f"{i}@{h}:{cfg.kafka_controller_port}" for i, h in enumerate(cfg.hosts))
    else:
        voters = f"1@127.0.0.1:{cfg.kafka_controller_port}"
    protocols = f"{client}:{client},CONTROLLER:{'SSL' if cfg.secure else 'PLAINTEXT'}"
    if cfg.kafka_side_port:
        # Clients that bootstrap here are told the broker is at the advertised port: a test's proxy
        # in front of it carries all their traffic, and only theirs.
        listeners += f",SIDE://127.0.0.1:{cfg.kafka_side_port}"
        advertised += f",SIDE://127.0.0.1:{cfg.kafka_side_advertised_port or cfg.kafka_side_port}"
        protocols += f",SIDE:{client}"
    return f"""# Written by infra/local/kafka.py; edits are overwritten on start.
process.roles=broker,controller
node.id={node_id(cfg, index)}
controller.quorum.voters={voters}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name={client}
listener.security.protocol.map={protocols}
{_security_properties(cfg) if cfg.secure else ""}log.dirs={home / 'data'}
{_replication_properties(cfg)}offsets.topic.num.partitions=12
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


def _replication_properties(cfg: LocalInfraSettings) -> str:
    """Internal topics as replicated as `parley topics` makes the catalog's (parley/topics.py)."""
    rf = replication_factor(cfg.replicas)
    isr = min_insync_replicas(rf)
    text = f"""# {"One node: every internal topic has one replica" if rf == 1 else f"{rf} replicas, {isr} in sync for a write"}.
offsets.topic.replication.factor={rf}
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
default.replication.factor={rf}
min.insync.replicas={isr}
"""
    if cfg.replicated:
        # A killed broker leaves the ISRs once the controller fences it: after 6 s of missed heartbeats,
        # not the default 9 s (an acks=all produce to a partition it followed waits that long).
        text += "broker.heartbeat.interval.ms=1500\nbroker.session.timeout.ms=6000\n"
    return text


def _security_properties(cfg: LocalInfraSettings) -> str:
    m = secure.material(cfg)
    login = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    password = m.kafka_password.read_text().strip()
    side = (
        f"listener.name.side.scram-sha-512.sasl.jaas.config={login};\nlistener.name.side.ssl.client.auth=required\n"
        if cfg.kafka_side_port
        else ""
    )
    return f"""sasl.enabled.mechanisms={secure.MECHANISM}
sasl.mechanism.inter.broker.protocol={secure.MECHANISM}
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={login} username="{secure.USER}" password="{password}";
{side}ssl.keystore.type=PEM
ssl.keystore.location={m.server}
ssl.truststore.type=PEM
ssl.truststore.location={m.ca}
# Unprefixed, it holds for the SSL (controller) listener only; a SASL_SSL listener wants its own (KIP-684).
ssl.client.auth=required
listener.name.sasl_ssl.ssl.client.auth=required
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


def prepare(cfg: LocalInfraSettings, lib: Path, index: int = 0) -> JvmService:
    """Write configs and format the storage once (KRaft needs a cluster id, the same on every node;
    secure mode: and its SCRAM user)."""
    svc = service(cfg, index)
    (svc.home / "logs").mkdir(parents=True, exist_ok=True)
    if cfg.secure:
        secure.ensure(cfg)
    secure.write_private(svc.home / "server.properties", server_properties(cfg, svc.home, index))  # a password in it
    (svc.home / "log4j2.properties").write_text(LOG4J2.format(logs=svc.home / "logs"))
    formatted_secure = svc.home / "formatted-secure"  # the storage holds the SCRAM user
    if cfg.secure and (svc.home / "data" / "meta.properties").exists() and not formatted_secure.exists():
        raise InfraError(
            f"Kafka's storage under {svc.home} was formatted without PARLEY_INFRA_SECURE, so it has no SCRAM "
            "user to log in with: use another PARLEY_DATA_DIR for the secure mode (or delete that directory)"
        )
    if not (svc.home / "data" / "meta.properties").exists():
        cluster_id = _cluster_id(cfg)
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
                *(_scram_user(cfg) if cfg.secure else ()),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise InfraError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")
        if cfg.secure:
            formatted_secure.touch()
    return svc


def _cluster_id(cfg: LocalInfraSettings) -> str:
    """A new id for a single node; a replicated cluster's nodes share one, kept beside them."""
    cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if cluster_id.startswith("-"):
        cluster_id = "A" + cluster_id[1:]
    if not cfg.replicated:
        return cluster_id
    kept = cfg.home("kafka").parent / "kafka-cluster-id"
    kept.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(kept, "x") as out:  # the nodes are prepared at once: the first to get here chooses
            out.write(cluster_id + "\n")
        return cluster_id
    except FileExistsError:
        pass
    deadline = time.monotonic() + 5
    while not (chosen := kept.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.01)  # created, not yet written
    return chosen


def _scram_user(cfg: LocalInfraSettings) -> tuple[str, ...]:
    """KRaft keeps SCRAM users in its metadata log: the first one is written when the storage is formatted
    (KIP-900), before any broker could take the request to create one."""
    password = secure.material(cfg).kafka_password.read_text().strip()
    return ("--add-scram", f"{secure.MECHANISM}=[name={secure.USER},password={password}]")


def node_id(cfg: LocalInfraSettings, index: int = 0) -> int:
    return index if cfg.replicated else 1


def healthy(cfg: LocalInfraSettings, index: int = 0) -> bool:
    """True once broker ``index`` answers a metadata request that lists it: registered with the
    controllers and not fenced (secure mode: over SASL_SSL, as the parley user)."""
    settings, _ = secure.client_settings(cfg)
    settings = replace(settings, bootstrap=f"{cfg.hosts[index]}:{cfg.kafka_port}")
    client = AdminClient({**kafka_config(settings), "logger": _QUIET, "socket.timeout.ms": 1000})
    try:
        return node_id(cfg, index) in client.list_topics(timeout=1).brokers
    except KafkaException:
        return False


def log_file(cfg: LocalInfraSettings, index: int = 0) -> Path:
    return cfg.home("kafka", index) / "logs" / "server.log"


_QUIET = logging.getLogger("parley.infra.kafka-probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
