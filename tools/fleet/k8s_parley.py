"""Parley's own services on Kubernetes: the gateway and every consumer group of tools/topology.py.

What each runs, reads and is grouped as comes from the topology and the topic
catalog; what is decided here is only how each runs on a cluster: its size,
its floor of replicas, and the lag per member at which KEDA adds one. Every
consumer-group member is scaled by KEDA's Kafka scaler on its group's lag and
never past the partitions its group can use (a member beyond them idles); the
gateway, which is in no group, by KEDA's Prometheus scaler on its open streams.

Two ConfigMaps configure every Parley container (``envFrom``): ``parley-infra``,
which infra/terraform makes (modules/parley-connection) with every connection
setting of the environment (brokers, users, keyspace, TLS, the KMS key, the
buckets), and ``parley-config``, rendered here with only what the fleet spec
decides (engine URLs, pools, metrics, logging). No setting is in both. The
Secrets and the CA that ``parley-infra``'s file settings point at are mounted
at Terraform's paths (``MOUNTED``). Pods run as the service accounts Terraform
binds to IAM roles by EKS Pod Identity (``ACCOUNTS``).
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
#: infra/terraform's ConfigMap of every connection setting (modules/parley-connection): referenced, never rendered.
INFRA_CONFIG = "parley-infra"
#: Terraform's Secret of KEDA's own Kafka login (sasl, username, password, tls); the TriggerAuthentication
#: that reads it has its name.
KEDA_KAFKA = "parley-keda-kafka"


@dataclass(frozen=True)
class Mounted:
    """A Secret or ConfigMap Terraform makes, mounted read-only at ``path``: each key a file there, where
    ``parley-infra``'s ``*_FILE`` and ``*_CA`` settings point."""

    name: str
    path: str
    config_map: bool = False  # a ConfigMap (a CA is no secret), else a Secret


KAFKA_SECRET = Mounted("parley-kafka", "/run/secrets/parley/kafka")  # password
CASSANDRA_SECRET = Mounted("parley-cassandra", "/run/secrets/parley/cassandra")  # password
#: ca.crt. MSK's brokers chain to Amazon's public CAs (the system's): only Cassandra has a CA file.
CASSANDRA_CA = Mounted("parley-cassandra-ca", "/etc/parley/cassandra-ca", config_map=True)
MOUNTED = (KAFKA_SECRET, CASSANDRA_SECRET, CASSANDRA_CA)  # no KEK: AWS KMS wraps data keys (PARLEY_KMS=aws)

#: The service account of each kind of Parley process (a Service's first module argument): the names
#: infra/terraform's workload-identity module binds to IAM roles (envs/production/platform,
#: ``parley_service_accounts``). Terraform makes only the bindings, so the accounts are rendered here.
ACCOUNTS = {
    "gateway": "parley-gateway",
    "streams": "parley-streams",
    "documents": "parley-documents",
    "workers": "parley-workers",
}
#: Bound too, for the operators' one-off pods (``parley archive``, replay; the Kafka ACLs): rendered so a Job can
#: run as them; no Deployment does.
JOB_ACCOUNTS = ("parley-archive", "parley-kafka-admin")

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
    # a few writes per text: a backlog of a few thousand texts is seconds; search is behind by that much
    "search": GroupPlan(Sizing("200m", "256Mi", "1", "512Mi"), 1, lag_threshold=2000),
    "moderation": GroupPlan(Sizing("500m", "1Gi", "2", "2Gi"), 2, lag_threshold=2000),
    # rare and short (an erasure is a few appends and writes); one member, a second only behind a backlog
    "erasure": GroupPlan(Sizing("100m", "256Mi", "500m", "512Mi"), 1, lag_threshold=20),
    # one call at a time per executor: a few queued calls are worth another member
    "tools": GroupPlan(Sizing("100m", "256Mi", "500m", "512Mi"), 2, lag_threshold=50),
    "tool-executor": GroupPlan(Sizing("100m", "256Mi", "500m", "512Mi"), 2, lag_threshold=4, grace_s=330),
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
    """What the fleet spec decides, beside ``parley-infra``; ``engine_urls``: each pool's SGLang API."""
    small = engine_urls.get("small", "")  # titles and summaries are the small pool's work; none: both off
    data = {
        "PARLEY_LOG_LEVEL": "INFO",
        "PARLEY_METRICS_HOST": "0.0.0.0",
        "PARLEY_METRICS_PORT": str(k.METRICS_PORT),
        "PARLEY_STREAMS_DATADIR": "/var/lib/parley/streams",
        "PARLEY_ROUTER_POOLS": ",".join(f"{p.name}={p.served_model_name}" for p in spec.pools),
        "PARLEY_POOL_TEMPLATES": ",".join(f"{p.name}={p.template}" for p in spec.pools),
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
    """KEDA's login for reading group offsets: its own SCRAM user, every parameter from Terraform's Secret."""
    params = ("sasl", "username", "password", "tls")
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": k.meta(KEDA_KAFKA, namespace, k.labels("config", "config")),
        "spec": {"secretTargetRef": [{"parameter": p, "name": KEDA_KAFKA, "key": p} for p in params]},
    }


def kafka_lag_trigger(group: str, lag_threshold: int) -> Doc:
    """KEDA's Kafka scaler on ``group``'s lag over every topic the group commits (its own reads, no others).

    The target's pods are the group's members: KEDA wants no more of them than the partitions
    (``allowIdleConsumers: false``), and ``maxReplicaCount`` (``group_cap``) says the same. The brokers are
    ``parley-infra``'s, read from the target container's environment (ScaledObject metadata cannot name a
    ConfigMap), so the target must be one whose pod template KEDA finds (``spec.template``).
    """
    return {
        "type": "kafka",
        "metadata": {
            "bootstrapServersFromEnv": "PARLEY_KAFKA_BOOTSTRAP",
            "consumerGroup": group,
            "lagThreshold": str(lag_threshold),
            "offsetResetPolicy": "earliest",  # never committed: the whole partition is work, as `parley ops lag` says
            "allowIdleConsumers": "false",
        },
        "authenticationRef": {"name": KEDA_KAFKA},
    }


def exported_lag_trigger(namespace: str, group: str, lag_threshold: int) -> Doc:
    """The same lag, from what the group's members export (``parley_consumer_lag``, each partition once).

    For targets KEDA v2.21 finds no containers in (a LeaderWorkerSet: it reads a pod template at
    ``spec.template`` only), so no environment to take the brokers from.
    """
    series = f'parley_consumer_lag{{namespace="{namespace}", group="{group}"}}'
    return {
        "type": "prometheus",
        "metadata": {
            "serverAddress": PROMETHEUS_URL,
            "query": f"sum(max by (topic, partition) ({series}))",
            "threshold": str(lag_threshold),
        },
    }


def group_cap(service: Service) -> int:
    """The most members ``service``'s group can use: the partitions of the largest topic it reads.

    Reads outside the group (fleet.heartbeats, chat.control, the context builder's user.memory) are
    never larger than the group's own topics; tests/unit/tools/test_k8s_render.py holds that against
    the processors' wirings.
    """
    return max(TOPICS[t].partitions for t in service.consumes)


def parley_volumes(*extra: Doc) -> list[Doc]:
    mounted = [k.config_map_volume(m.name, m.name) if m.config_map else k.secret_volume(m.name, m.name) for m in MOUNTED]
    return [*mounted, k.empty_dir("tmp", size="1Gi"), *extra]


def parley_mounts(*extra: Doc) -> list[Doc]:
    return [*(k.mount(m.name, m.path, read_only=True) for m in MOUNTED), k.mount("tmp", "/tmp"), *extra]


def account(service: Service) -> str:
    """The Terraform-bound service account ``service``'s pods run as."""
    return ACCOUNTS[service.module_args[0].split(".")[0]]  # streams.tool_executor runs as the processors do


def service_accounts(namespace: str) -> list[Doc]:
    """Every account Terraform binds: the processes' and the Jobs'."""
    label = k.labels("service-accounts", "identity")
    return [k.service_account(name, namespace, label) for name in (*ACCOUNTS.values(), *JOB_ACCOUNTS)]


def parley_container(name: str, spec: FleetSpec, service: Service, sizing: Sizing, *, env: list[Doc], **more: Any) -> Doc:
    """A Parley process as the topology starts it, configured from ``parley-infra``, ``parley-config`` and the
    files Terraform's settings point at."""
    extra_mounts = more.pop("mounts", [])
    return k.container(
        name,
        spec.images.parley,
        ["python", "-m", *service.module_args],
        sizing,
        env=env,
        mounts=parley_mounts(*extra_mounts),
        envFrom=[{"configMapRef": {"name": INFRA_CONFIG}}, {"configMapRef": {"name": CONFIG}}],
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
        ports=[k.port("http", 8000), k.port("metrics", k.METRICS_PORT)],
        # 503 while draining or while Kafka does not answer: out of the Service, still listening
        readinessProbe=k.http_probe("/readyz", "http", period_s=2, failures=2),
        livenessProbe=k.http_probe("/healthz", "http", period_s=10, failures=3),
        startupProbe=k.http_probe("/healthz", "http", period_s=2, failures=30),
        lifecycle={"preStop": {"sleep": {"seconds": GATEWAY_PRESTOP_S}}},
    )
    pod = k.pod_spec(
        [main],
        service_account=account(GATEWAY),
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
        k.deployment(name, ns, label, pod, replicas=None, **strategy),
        k.service(name, ns, label, [("http", 8000), ("metrics", k.METRICS_PORT)]),
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
        k.service_monitor(name, ns, label, ["metrics"]),  # never the API port: /metrics is not public
    ]


# ------------------------------------------------------------------ consumer groups


def group_services() -> list[Service]:
    """The topology's consumer groups that are not inference workers (those are per pool)."""
    return [s for s in SERVICES if s.group and not s.group.startswith("workers.")]


#: ClamAV's databases in a document worker's pod: freshclam writes them, the worker's clamscan reads them.
CLAMAV_VOLUME, CLAMAV_DB = "clamav", "/var/lib/clamav"
FRESHCLAM = ["freshclam", "--config-file=/app/infra/clamav/freshclam.conf", "--stdout"]
#: freshclam loads what it downloaded once to test it (about 1 GiB with ClamAV's full databases).
FRESHCLAM_SIZING = Sizing(cpu="100m", memory="256Mi", cpu_limit="1", memory_limit="1536Mi")


def signatures(spec: FleetSpec, worker: Doc) -> tuple[Doc, Doc]:
    """ClamAV's real signatures for a document worker (the shipped ones know EICAR only): an init container
    fetches them before the worker starts, which refuses to start without them
    (PARLEY_DOCUMENTS_REAL_SIGNATURES), and a sidecar keeps them current. ``worker`` gets the mount and
    settings; (init container, sidecar)."""
    worker["volumeMounts"].append(k.mount(CLAMAV_VOLUME, CLAMAV_DB, read_only=True))
    worker["env"] = [
        *worker.get("env", []),
        k.env_value("PARLEY_DOCUMENTS_CLAMAV_DB", CLAMAV_DB),
        k.env_value("PARLEY_DOCUMENTS_REAL_SIGNATURES", "true"),
    ]
    mounts = [k.mount(CLAMAV_VOLUME, CLAMAV_DB)]
    init = k.container("freshclam", spec.images.parley, FRESHCLAM, FRESHCLAM_SIZING, mounts=mounts)
    refresher = k.container("freshclam-daemon", spec.images.parley, [*FRESHCLAM, "--daemon"], FRESHCLAM_SIZING, mounts=mounts)
    return init, refresher


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
    more: Doc = {}
    containers = [main]
    if name == "documents":
        init, refresher = signatures(spec, main)
        volumes.append(k.empty_dir(CLAMAV_VOLUME, size="2Gi"))
        containers.append(refresher)
        more["initContainers"] = [init]
    pod = k.pod_spec(containers, service_account=account(service), grace_s=plan.grace_s, volumes=volumes, **more)
    scaling = Scaling(min=plan.min_replicas, max=group_cap(service))
    return [
        k.deployment(name, ns, label, pod, replicas=None),
        k.service(name, ns, label, [("metrics", k.METRICS_PORT)]),
        k.disruption_budget(name, ns, label),
        k.scaled_object(
            name,
            ns,
            label,
            k.target("Deployment", name, env_from=name),
            scaling,
            [kafka_lag_trigger(service.group, plan.lag_threshold)],
        ),
        k.service_monitor(name, ns, label, ["metrics"]),
    ]
