"""Parley's own services on Kubernetes: the gateway and every consumer group of tools/topology.py.

What each runs, reads and is grouped as comes from the topology and the topic
catalog; what is decided here is only how each runs on a cluster: its size,
its floor of replicas, and the lag per member at which KEDA adds one. Every
consumer-group member is scaled by KEDA's Kafka scaler on its group's lag and
never past the partitions its group can use (a member beyond them idles); the
gateway, which is in no group, by KEDA's Prometheus scaler on its open streams.

Connection and transport-security settings are one ConfigMap (``parley-config``)
plus the Secrets the operator creates (``SECRETS``), mounted as files where the
settings take a file (``PARLEY_*_PASSWORD_FILE``, the CA) and read as variables
where they take a value (the user names).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from gateway.drain import CUT_GRACE_S
from gateway.settings import GatewaySettings
from schemas.catalog import TOPICS
from tools.fleet import k8s_objects as k
from tools.fleet.k8s_objects import Doc, Scaling, Sizing
from tools.fleet.spec import FleetSpec
from tools.topology import GATEWAY, SERVICES, Service
from workers.settings import WorkerSettings

CONFIG = "parley-config"
KAFKA_AUTH = "parley-kafka"  # the KEDA TriggerAuthentication: same name as the Secret it reads


@dataclass(frozen=True)
class SecretFiles:
    """A Secret the operator creates, mounted read-only at ``path`` (its keys are files there)."""

    name: str
    path: str
    keys: tuple[str, ...]


KAFKA_SECRET = SecretFiles("parley-kafka", "/var/run/secrets/parley/kafka", ("username", "password", "ca.crt"))
CASSANDRA_SECRET = SecretFiles("parley-cassandra", "/var/run/secrets/parley/cassandra", ("username", "password", "ca.crt"))
#: The local KMS's key file (parley/keys.py): every process that seals or opens content reads it.
KMS_SECRET = SecretFiles("parley-kms", "/var/run/secrets/parley/kms", ("kek.json",))
SECRETS = (KAFKA_SECRET, CASSANDRA_SECRET, KMS_SECRET)

#: Production transport: SASL/SCRAM over TLS to Kafka, login + TLS to Cassandra (docs/transport-security.md).
KAFKA_SECURITY_PROTOCOL = "SASL_SSL"
KAFKA_SASL_MECHANISM = "SCRAM-SHA-512"
#: KEDA's names for the same (its Kafka scaler speaks to the brokers as Parley does).
KEDA_SASL = {"SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}

#: Where KEDA asks Prometheus for the gateway's open streams: the prometheus-operator's governing Service.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
#: The gateway's gauge of live SSE streams (parley/metrics.py), the signal its replicas follow.
OPEN_STREAMS = "parley_gateway_open_streams"
#: Streams one gateway process serves at ~70 % of a core (docs/operations.md, "How many partitions chat.tokens needs").
STREAMS_PER_GATEWAY = 190
#: Floor 2 (one can drain while the other serves); ceiling chat.tokens' partitions, the most gateway shards there
#: can be, so the same bound holds once the gateways are sharded.
GATEWAY_SCALING = Scaling(min=2, max=TOPICS["chat.tokens"].partitions)
#: Endpoints are withdrawn while this runs, so no new request reaches a gateway that has begun to drain.
GATEWAY_PRESTOP_S = 5
GATEWAY_SIZING = Sizing(cpu="1", memory="1Gi", cpu_limit="2", memory_limit="2Gi")
WORKER_SIZING = Sizing(cpu="500m", memory="512Mi", cpu_limit="2", memory_limit="1Gi")


@dataclass(frozen=True)
class GroupPlan:
    """How one consumer group's members run: their size, the floor, and the lag per member that adds one."""

    sizing: Sizing
    min_replicas: int  # 2 on the chat path: a member's death costs its session timeout, not a cold start
    lag_threshold: int  # records behind per member (its group's total lag / this = members wanted)
    grace_s: int = 30


#: Every consumer group of the topology but the workers (sized per pool from the fleet spec). A service
#: added to tools/topology.py with a group and no row here fails ``render``, naming itself.
GROUP_PLANS: dict[str, GroupPlan] = {
    "context": GroupPlan(Sizing("500m", "1Gi", "2", "2Gi"), 2, lag_threshold=100),
    "router": GroupPlan(Sizing("500m", "512Mi", "1", "1Gi"), 2, lag_threshold=100),
    # chat.tokens' checkpoints make most of its records: thousands behind is a second of replies
    "materializer": GroupPlan(Sizing("500m", "1Gi", "2", "2Gi"), 2, lag_threshold=2000),
    "usage": GroupPlan(Sizing("100m", "256Mi", "500m", "512Mi"), 1, lag_threshold=1000),
    "titler": GroupPlan(Sizing("100m", "256Mi", "500m", "512Mi"), 1, lag_threshold=200),
    "moderation": GroupPlan(Sizing("500m", "1Gi", "2", "2Gi"), 2, lag_threshold=2000),
    # a job is minutes of OCR and embedding: a few waiting is reason enough; the child process takes 2 GiB
    "documents": GroupPlan(Sizing("1", "2Gi", "4", "4Gi"), 1, lag_threshold=4, grace_s=60),
}


def setting_default(cls: type, env_name: str) -> Any:
    """The default of the setting read from ``env_name`` (so a rendered value cannot drift from the code's)."""
    for f in fields(cls):
        if f.metadata["env"] == env_name:
            return f.default
    raise KeyError(f"{cls.__name__} has no setting {env_name}")


GATEWAY_DRAIN_S = setting_default(GatewaySettings, "PARLEY_GATEWAY_DRAIN_S")
WORKER_DRAIN_S = setting_default(WorkerSettings, "PARLEY_WORKER_DRAIN_TIMEOUT_S")


def gateway_grace_s() -> int:
    """preStop, then the drain, the cut streams' last events, and uvicorn's close (operations.md: drain + ~10 s)."""
    return int(GATEWAY_PRESTOP_S + GATEWAY_DRAIN_S + CUT_GRACE_S + 10)


def worker_grace_s() -> int:
    """The worker's drain, then handing back and leaving its group."""
    return int(WORKER_DRAIN_S + 15)


# ------------------------------------------------------------------ configuration


def config_map(spec: FleetSpec, engine_urls: dict[str, str]) -> Doc:
    """Every setting the cluster changes from the local defaults; ``engine_urls``: each pool's SGLang API."""
    small = engine_urls.get("small", "")  # titles and summaries are the small pool's work; none: both off
    data = {
        "PARLEY_KAFKA_BOOTSTRAP": "parley-kafka-bootstrap.kafka.svc:9093",
        "PARLEY_KAFKA_REPLICATION": "3",
        "PARLEY_KAFKA_SECURITY_PROTOCOL": KAFKA_SECURITY_PROTOCOL,
        "PARLEY_KAFKA_SASL_MECHANISM": KAFKA_SASL_MECHANISM,
        "PARLEY_KAFKA_SASL_PASSWORD_FILE": f"{KAFKA_SECRET.path}/password",
        "PARLEY_KAFKA_SSL_CA": f"{KAFKA_SECRET.path}/ca.crt",
        "PARLEY_CASSANDRA_HOSTS": "parley-dc1-service.cassandra.svc",
        "PARLEY_CASSANDRA_DC": "dc1",
        "PARLEY_CASSANDRA_REPLICATION": "{'class': 'NetworkTopologyStrategy', 'dc1': 3}",
        "PARLEY_CASSANDRA_PASSWORD_FILE": f"{CASSANDRA_SECRET.path}/password",
        "PARLEY_CASSANDRA_SSL": "true",
        "PARLEY_CASSANDRA_SSL_CA": f"{CASSANDRA_SECRET.path}/ca.crt",
        "PARLEY_KMS": "local",
        "PARLEY_KMS_KEY_FILE": f"{KMS_SECRET.path}/kek.json",
        "PARLEY_DOCUMENTS_BLOB_URL": "s3://parley-documents/originals",
        "PARLEY_LOG_LEVEL": "INFO",
        "PARLEY_METRICS_HOST": "0.0.0.0",
        "PARLEY_METRICS_PORT": str(k.METRICS_PORT),
        "PARLEY_STREAMS_DATADIR": "/var/lib/parley/streams",
        "PARLEY_ROUTER_POOLS": ",".join(f"{p.name}={p.served_model_name}" for p in spec.pools),
        "PARLEY_TITLER_ENGINE_URL": small,
        "PARLEY_CONTEXT_SUMMARY_URL": small,
        "HOME": "/tmp",  # the image has no home for uid 10001; nothing kept there outlives the pod
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k.meta(CONFIG, spec.namespace, k.labels("config", "config")),
        "data": data,
    }


def kafka_trigger_auth(namespace: str) -> Doc:
    """KEDA's credentials for reading group offsets: the Parley user's, from the same Secret."""
    refs = [("username", "username"), ("password", "password"), ("ca", "ca.crt")]
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": k.meta(KAFKA_AUTH, namespace, k.labels("config", "config")),
        "spec": {"secretTargetRef": [{"parameter": p, "name": KAFKA_SECRET.name, "key": key} for p, key in refs]},
    }


def kafka_lag_trigger(group: str, lag_threshold: int) -> Doc:
    """KEDA's Kafka scaler on ``group``'s lag over every topic the group commits (its own reads, no others).

    The target's pods are the group's members: KEDA wants no more of them than the partitions
    (``allowIdleConsumers: false``), and ``maxReplicaCount`` (``group_cap``) says the same.
    """
    return {
        "type": "kafka",
        "metadata": {
            "bootstrapServersFromEnv": "PARLEY_KAFKA_BOOTSTRAP",
            "consumerGroup": group,
            "lagThreshold": str(lag_threshold),
            "offsetResetPolicy": "earliest",  # never committed: the whole partition is work, as `parley ops lag` says
            "allowIdleConsumers": "false",
            "sasl": KEDA_SASL[KAFKA_SASL_MECHANISM],
            "tls": "enable",
        },
        "authenticationRef": {"name": KAFKA_AUTH},
    }


def group_cap(service: Service) -> int:
    """The most members ``service``'s group can use: the partitions of the largest topic it reads.

    Reads outside the group (fleet.heartbeats, chat.control, the context builder's user.memory) are
    never larger than the group's own topics; tests/unit/tools/test_k8s_render.py holds that against
    the processors' wirings.
    """
    return max(TOPICS[t].partitions for t in service.consumes)


def parley_env() -> list[Doc]:
    """Variables every Parley container sets beside ``parley-config``: the user names, from their Secrets."""
    return [
        {"name": "PARLEY_KAFKA_SASL_USERNAME", "valueFrom": {"secretKeyRef": {"name": KAFKA_SECRET.name, "key": "username"}}},
        {
            "name": "PARLEY_CASSANDRA_USERNAME",
            "valueFrom": {"secretKeyRef": {"name": CASSANDRA_SECRET.name, "key": "username"}},
        },
    ]


def parley_volumes(*extra: Doc) -> list[Doc]:
    return [*(k.secret_volume(s.name, s.name) for s in SECRETS), k.empty_dir("tmp", size="1Gi"), *extra]


def parley_mounts(*extra: Doc) -> list[Doc]:
    return [*(k.mount(s.name, s.path, read_only=True) for s in SECRETS), k.mount("tmp", "/tmp"), *extra]


def parley_container(name: str, spec: FleetSpec, service: Service, sizing: Sizing, *, env: list[Doc], **more: Any) -> Doc:
    """A Parley process as the topology starts it, configured from ``parley-config`` and its Secrets."""
    extra_mounts = more.pop("mounts", [])
    return k.container(
        name,
        spec.images.parley,
        ["python", "-m", *service.module_args],
        sizing,
        env=[*parley_env(), *env],
        mounts=parley_mounts(*extra_mounts),
        envFrom=[{"configMapRef": {"name": CONFIG}}],
        **more,
    )


def hold_on_failure(scaling: Scaling) -> Doc:
    """KEDA's fallback when its metric cannot be read: keep the replicas there are (at least the floor)."""
    return {"failureThreshold": 4, "replicas": scaling.min, "behavior": "currentReplicasIfHigher"}


# ------------------------------------------------------------------ the gateway


def gateway(spec: FleetSpec) -> list[Doc]:
    """Deployment, Service, PodDisruptionBudget, ScaledObject (an HPA on open streams), ServiceMonitor."""
    ns, name = spec.namespace, GATEWAY.name
    label = k.labels(name, "gateway")
    main = parley_container(
        name,
        spec,
        GATEWAY,
        GATEWAY_SIZING,
        env=[
            k.env_value("PARLEY_GATEWAY_HOST", "0.0.0.0"),
            k.env_value("PARLEY_GATEWAY_PORT", 8000),
            k.env_value("PARLEY_GATEWAY_DRAIN_S", GATEWAY_DRAIN_S),
        ],
        ports=[k.port("http", 8000)],
        # 503 while draining or while Kafka does not answer: out of the Service, still listening
        readinessProbe=k.http_probe("/readyz", "http", period_s=2, failures=2),
        livenessProbe=k.http_probe("/healthz", "http", period_s=10, failures=3),
        startupProbe=k.http_probe("/healthz", "http", period_s=2, failures=30),
        lifecycle={"preStop": {"sleep": {"seconds": GATEWAY_PRESTOP_S}}},
    )
    pod = k.pod_spec(
        [main],
        service_account=name,
        grace_s=gateway_grace_s(),
        volumes=parley_volumes(),
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": k.selector(name)},
            }
        ],
    )
    # Surge, never unavailable: a rollout adds a gateway before one drains.
    strategy = {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}
    query = f'sum({OPEN_STREAMS}{{namespace="{ns}", service="{name}"}})'
    trigger = {
        "type": "prometheus",
        "metadata": {"serverAddress": PROMETHEUS_URL, "query": query, "threshold": str(STREAMS_PER_GATEWAY)},
    }
    return [
        k.service_account(name, ns, label),
        k.deployment(name, ns, label, pod, replicas=None, **strategy),
        k.service(name, ns, label, [("http", 8000)]),
        k.disruption_budget(name, ns, label),
        k.scaled_object(
            name,
            ns,
            label,
            k.target("Deployment", name),
            GATEWAY_SCALING,
            [trigger],
            fallback=hold_on_failure(GATEWAY_SCALING),
        ),
        k.service_monitor(name, ns, label, ["http"]),
    ]


# ------------------------------------------------------------------ consumer groups


def group_services() -> list[Service]:
    """The topology's consumer groups that are not inference workers (those are per pool)."""
    return [s for s in SERVICES if s.group and not s.group.startswith("workers.")]


def consumer(spec: FleetSpec, service: Service) -> list[Doc]:
    """A processor or the document workers: Deployment, metrics Service, PDB, ScaledObject, ServiceMonitor."""
    if service.name not in GROUP_PLANS:
        raise KeyError(f"{service.name} (tools/topology.py) has no GroupPlan in tools/fleet/k8s_parley.py")
    plan, ns, name = GROUP_PLANS[service.name], spec.namespace, service.name
    assert service.group is not None
    label = k.labels(name, "processor")
    faust = service.module_args[0] == "streams"  # keeps its state directory (PARLEY_STREAMS_DATADIR)
    main = parley_container(
        name,
        spec,
        service,
        plan.sizing,
        env=[],
        ports=[k.port("metrics", k.METRICS_PORT)],
        livenessProbe=k.tcp_probe("metrics", period_s=15, failures=4),
        mounts=[k.mount("state", "/var/lib/parley")] if faust else [],
    )
    volumes = parley_volumes(k.empty_dir("state", size="2Gi")) if faust else parley_volumes()
    pod = k.pod_spec([main], service_account=name, grace_s=plan.grace_s, volumes=volumes)
    scaling = Scaling(min=plan.min_replicas, max=group_cap(service))
    return [
        k.service_account(name, ns, label),
        k.deployment(name, ns, label, pod, replicas=None),
        k.service(name, ns, label, [("metrics", k.METRICS_PORT)]),
        k.disruption_budget(name, ns, label),
        k.scaled_object(
            name, ns, label, k.target("Deployment", name), scaling, [kafka_lag_trigger(service.group, plan.lag_threshold)]
        ),
        k.service_monitor(name, ns, label, ["metrics"]),
    ]
