"""A pool's SGLang engines and the Parley workers that front them, on Kubernetes.

How a worker finds its engines decides the layout. Each engine is its own member
of the pool's consumer group (workers/settings.py ``replicas``), so the router's
cache-aware placement is per engine only if every request of a member reaches the
same engine: a Service in between would spread one member's requests over every
replica (and the worker refuses one URL twice). So:

- **single-node replicas**: one pod holds a worker and its ``engines_per_worker``
  engines, each engine a container with its own GPUs and port, the worker
  reaching them on ``127.0.0.1``. The pod is the unit KEDA scales on the group's
  lag, so engines and the members that drive them come and go together, up to
  the partitions of ``chat.inference.<pool>`` (one member per engine). A Parley
  release restarts the engines too (the price of the binding; a rollout takes
  one pod at a time);
- **multi-node replicas**: a LeaderWorkerSet, one group per replica, with the
  worker beside rank 0 in the leader pod (one engine per worker);
- **prefill/decode disaggregated**: each side a LeaderWorkerSet scaled on its own
  engines' load, the PD router (sglang-router) in front finding them by label
  through the Kubernetes API and placing each request cache-aware, and workers
  of their own that front the router's Service.

Engines drain after their worker: an engine's preStop waits out the worker's
drain (``PARLEY_WORKER_DRAIN_TIMEOUT_S``), so replies in flight finish or are
handed back before the engine under them stops.

Engines that talk to other nodes (every rank of a replica across nodes, both
sides of a disaggregated pool) take the nodes' EFA interfaces, ``EFA_PER_GPU``
for each GPU they hold: infra/terraform gives those node groups EFA in one
placement group. GPU pods select their pool's nodes by the labels Terraform
sets (``nvidia.com/gpu.product``, ``parley.dev/pool``).
"""

from __future__ import annotations

import math
from typing import Any

from parley.errors import ConfigError
from schemas.catalog import inference_topic, TOPICS
from tools.fleet import k8s_objects as k
from tools.fleet import k8s_parley as parley
from tools.fleet import sglang
from tools.fleet.k8s_objects import Doc, Scaling, Sizing
from tools.fleet.spec import FleetSpec, Phase, PoolSpec
from tools.topology import SERVICES, Service

LWS_API = "leaderworkerset.x-k8s.io/v1"
#: LeaderWorkerSet's label of a pod's index in its group (0: the leader, the one serving HTTP).
WORKER_INDEX = sglang.LEADER_LABEL[0]

#: Host resources beside each GPU: CPU for the scheduler and tokenizer processes, RAM to stage weights through.
CPU_PER_GPU = 8
SHM_PER_GPU_GIB = 4  # NCCL and the tokenizer's shared memory (/dev/shm), which counts against the memory limit
#: Weights download and load, CUDA graphs, DeepGEMM warm-up: long for the largest models, given to all.
ENGINE_STARTUP_S = 3600
#: A disaggregated side scales out when its requests (running + queued) pass this share of what it may run.
PHASE_TARGET_LOAD = 0.8
ROUTER_SIZING = Sizing(cpu="1", memory="1Gi", cpu_limit="4", memory_limit="2Gi")
#: The Secret with a Hugging Face token for gated models (optional: public models need none).
HF_SECRET = "parley-hf"
#: EFA interfaces per GPU on the nodes infra/terraform gives EFA: p5.48xlarge's 32 for its 8 H100s (each GPU's
#: share of the RDMA bandwidth). Instances with another ratio (p5en: 16 for 8) need this changed or an overlay.
EFA_PER_GPU = 4


def pool_docs(spec: FleetSpec, pool: PoolSpec, at: str) -> list[Doc]:
    """Every object of one pool; ``at`` names the pool in errors (``pools[0]``)."""
    launches = {launch.role: launch for launch in sglang.launches(pool, namespace=spec.namespace)}
    if pool.disaggregation is not None:
        return _disaggregated(spec, pool, launches, at)
    if pool.nodes_per_replica > 1:
        return _multi_node(spec, pool, launches["engine"], at)
    return _co_located(spec, pool, launches["engine"])


def engine_url(spec: FleetSpec, pool: PoolSpec) -> str:
    """The pool's SGLang API behind one Service (for titles and summaries, where any replica will do)."""
    if pool.disaggregation is not None:
        return f"http://{pool.name}-router.{spec.namespace}.svc:{pool.disaggregation.router.port}"
    return f"http://{worker_service(pool).name}.{spec.namespace}.svc:{pool.port}"


def worker_service(pool: PoolSpec) -> Service:
    return next(s for s in SERVICES if s.name == f"worker-{pool.name}")


def worker_cap(pool: PoolSpec, engines_per_worker: int) -> int:
    """Workers the pool's group can use: one member per engine, one engine per partition."""
    return TOPICS[inference_topic(pool.name)].partitions // engines_per_worker


# ------------------------------------------------------------------ single-node replicas: worker + engines in a pod


def _co_located(spec: FleetSpec, pool: PoolSpec, launch: sglang.Launch) -> list[Doc]:
    service, per = worker_service(pool), pool.engines_per_worker
    ns, name = spec.namespace, service.name
    label = k.labels(name, "worker", pool.name)
    ports = [pool.port + slot for slot in range(per)]
    engines = [
        _engine_container(f"sglang-{slot}", spec, pool, launch, port=p, after_worker=True) for slot, p in enumerate(ports)
    ]
    worker = _worker_container(spec, pool, service, [f"http://127.0.0.1:{p}" for p in ports])
    gpus = launch.gpus_per_node * per
    pod = _gpu_pod(pool, [worker, *engines], parley.account(service), grace_s=parley.worker_grace_s(), gpus=gpus)
    scaling = _worker_scaling(pool, per, pool.replicas.min, pool.replicas.max)
    # One pod at a time, none added: a surge pod would wait for GPUs that the old one holds.
    strategy = {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}
    metrics = [("metrics", k.METRICS_PORT), *((f"sglang-{slot}", p) for slot, p in enumerate(ports))]
    return [
        k.deployment(name, ns, label, pod, replicas=None, **strategy),
        k.service(name, ns, label, metrics),
        k.disruption_budget(name, ns, label),
        _lag_scaled(
            name, ns, label, k.target("Deployment", name, env_from="worker"), scaling, service, per * launch_concurrency(pool)
        ),
        k.service_monitor(name, ns, label, [p for p, _ in metrics]),
    ]


def launch_concurrency(pool: PoolSpec) -> int:
    """Requests one engine runs at once: what its worker member takes (PARLEY_WORKER_MAX_CONCURRENCY)."""
    return pool.max_running_requests


# ------------------------------------------------------------------ multi-node replicas: a LeaderWorkerSet per pool


def _multi_node(spec: FleetSpec, pool: PoolSpec, launch: sglang.Launch, at: str) -> list[Doc]:
    if pool.engines_per_worker != 1:
        raise ConfigError(
            f"{at}.engines_per_worker: a replica across nodes is its own group of pods, so its worker runs beside"
            f" its leader and fronts that engine only: set 1, got {pool.engines_per_worker}"
        )
    service = worker_service(pool)
    ns, name = spec.namespace, service.name
    label = k.labels(name, "worker", pool.name)
    engine = _engine_container("sglang", spec, pool, launch, port=pool.port, after_worker=True, efa=True)
    worker = _worker_container(spec, pool, service, [f"http://127.0.0.1:{pool.port}"])
    grace, account = parley.worker_grace_s(), parley.account(service)
    leader = _gpu_pod(pool, [worker, engine], account, grace_s=grace, gpus=launch.gpus_per_node)
    follower = _gpu_pod(pool, [_rank(engine)], account, grace_s=grace, gpus=launch.gpus_per_node)
    scaling = _worker_scaling(pool, 1, pool.replicas.min, pool.replicas.max)
    assert service.group is not None
    # KEDA finds no containers in a LeaderWorkerSet, so no PARLEY_KAFKA_BOOTSTRAP: the lag its members export.
    trigger = parley.exported_lag_trigger(ns, service.group, launch_concurrency(pool))
    return [
        _leader_worker_set(name, ns, label, leader, follower, launch.nodes),
        k.service(name, ns, label, [("metrics", k.METRICS_PORT), ("sglang", pool.port)], pods=_leaders(name)),
        k.disruption_budget(name, ns, label),
        k.scaled_object(
            name, ns, label, k.target("LeaderWorkerSet", name, LWS_API), scaling, [trigger],
            fallback=parley.hold_on_failure(scaling),
        ),
        k.service_monitor(name, ns, label, ["metrics", "sglang"]),
    ]


# ------------------------------------------------------------------ prefill/decode: two sides, a router, workers


def _disaggregated(spec: FleetSpec, pool: PoolSpec, launches: dict[str, sglang.Launch], at: str) -> list[Doc]:
    assert pool.disaggregation is not None
    if pool.engines_per_worker != 1:
        raise ConfigError(
            f"{at}.engines_per_worker: a disaggregated pool's workers front its router's one Service: set 1,"
            f" got {pool.engines_per_worker}"
        )
    docs: list[Doc] = []
    for phase in pool.engines:
        docs += _phase(spec, pool, phase, launches[phase.role])
    docs += _router(spec, pool, launches["router"])
    docs += _router_workers(spec, pool)
    return docs


def _phase(spec: FleetSpec, pool: PoolSpec, phase: Phase, launch: sglang.Launch) -> list[Doc]:
    ns, name = spec.namespace, f"{pool.name}-{phase.role}"
    label = {**k.labels(name, "engine", pool.name), **sglang.pod_labels(pool, phase.role)}
    engine = _engine_container("sglang", spec, pool, launch, port=pool.port, after_worker=False, efa=True, ipc_lock=True)
    annotations = {}
    if phase.role == "prefill":
        assert pool.disaggregation is not None
        annotations[sglang.BOOTSTRAP_PORT_ANNOTATION] = str(pool.disaggregation.bootstrap_port)
    # SGLang only, no AWS calls: an account of its own that Terraform binds to nothing
    leader = _gpu_pod(pool, [engine], name, grace_s=30, gpus=launch.gpus_per_node, root=True)
    follower = _gpu_pod(pool, [_rank(engine)], name, grace_s=30, gpus=launch.gpus_per_node, root=True)
    scaling = Scaling(min=phase.replicas.min, max=phase.replicas.max, scale_down_window_s=900, scale_down_period_s=600)
    # Running + waiting requests of this side's leaders (each replica's /metrics counts all its ranks).
    series = '{__name__=~"sglang:num_running_reqs|sglang:num_queue_reqs", namespace="%s", service="%s"}' % (ns, name)
    trigger = {
        "type": "prometheus",
        "metadata": {
            "serverAddress": parley.PROMETHEUS_URL,
            "query": f"sum({series})",
            "threshold": str(max(1, int(PHASE_TARGET_LOAD * phase.max_running_requests))),
        },
    }
    return [
        k.service_account(name, ns, label),
        _leader_worker_set(name, ns, label, leader, follower, launch.nodes, annotations),
        k.service(name, ns, label, [("sglang", pool.port)], pods=_leaders(name)),
        k.scaled_object(
            name, ns, label, k.target("LeaderWorkerSet", name, LWS_API), scaling, [trigger],
            fallback=parley.hold_on_failure(scaling),
        ),
        k.service_monitor(name, ns, label, ["sglang"]),
    ]


def _router(spec: FleetSpec, pool: PoolSpec, launch: sglang.Launch) -> list[Doc]:
    """sglang-router in PD mode; it lists and watches the pool's engine pods, so it alone gets an API token."""
    assert pool.disaggregation is not None
    ns, name = spec.namespace, f"{pool.name}-router"
    label = k.labels(name, "router", pool.name)
    main = k.container(
        "router",
        spec.images.sglang,
        list(launch.argv),
        ROUTER_SIZING,
        ports=[k.port("http", launch.port), k.port("metrics", sglang.ROUTER_METRICS_PORT)],
        mounts=[k.mount("tmp", "/tmp")],
        readinessProbe=k.tcp_probe("http", period_s=5, failures=3),
        livenessProbe=k.tcp_probe("http", period_s=15, failures=4),
    )
    pod = k.pod_spec(
        [main], service_account=name, grace_s=30, volumes=[k.empty_dir("tmp", size="1Gi")], automountServiceAccountToken=True
    )
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": k.meta(name, ns, label),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": k.meta(name, ns, label),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }
    return [
        k.service_account(name, ns, label),
        role,
        binding,
        k.deployment(name, ns, label, pod, replicas=pool.disaggregation.router.replicas),
        k.service(name, ns, label, [("http", launch.port), ("metrics", sglang.ROUTER_METRICS_PORT)]),
        k.disruption_budget(name, ns, label),
        k.service_monitor(name, ns, label, ["metrics"]),
    ]


def _router_workers(spec: FleetSpec, pool: PoolSpec) -> list[Doc]:
    assert pool.disaggregation is not None
    service = worker_service(pool)
    ns, name = spec.namespace, service.name
    label = k.labels(name, "worker", pool.name)
    decode = pool.disaggregation.decode
    cap = worker_cap(pool, 1)
    # At most, the workers together hold what the decode side runs at its most.
    concurrency = math.ceil(decode.max_running_requests * decode.replicas.max / cap)
    worker = _worker_container(spec, pool, service, [engine_url(spec, pool)], concurrency=concurrency)
    pod = k.pod_spec(
        [worker], service_account=parley.account(service), grace_s=parley.worker_grace_s(), volumes=parley.parley_volumes()
    )
    scaling = _worker_scaling(pool, 1, 1, cap)
    return [
        k.deployment(name, ns, label, pod, replicas=None),
        k.service(name, ns, label, [("metrics", k.METRICS_PORT)]),
        k.disruption_budget(name, ns, label),
        _lag_scaled(name, ns, label, k.target("Deployment", name, env_from="worker"), scaling, service, concurrency),
        k.service_monitor(name, ns, label, ["metrics"]),
    ]


# ------------------------------------------------------------------ parts


def _worker_scaling(pool: PoolSpec, per: int, engines_min: int, engines_max: int) -> Scaling:
    """Worker pods for ``engines_min``..``engines_max`` engines, ``per`` a pod, within the group's partitions."""
    cap = worker_cap(pool, per)
    high = min(max(1, engines_max // per), cap)
    return Scaling(min=min(math.ceil(engines_min / per), high), max=high, scale_down_window_s=600, scale_down_period_s=300)


def _lag_scaled(name: str, ns: str, label: dict[str, str], target: Doc, scaling: Scaling, service: Service, per_pod: int) -> Doc:
    assert service.group is not None
    return k.scaled_object(name, ns, label, target, scaling, [parley.kafka_lag_trigger(service.group, per_pod)])


def _worker_container(
    spec: FleetSpec, pool: PoolSpec, service: Service, urls: list[str], *, concurrency: int | None = None
) -> Doc:
    return parley.parley_container(
        "worker",
        spec,
        service,
        parley.WORKER_SIZING,
        env=[
            k.env_value("PARLEY_WORKER_ENGINE_URLS", ",".join(urls)),
            k.env_value("PARLEY_WORKER_MAX_CONCURRENCY", concurrency or launch_concurrency(pool)),
            k.env_value("PARLEY_WORKER_MODEL", pool.served_model_name),
            k.env_value("PARLEY_WORKER_DRAIN_TIMEOUT_S", parley.WORKER_DRAIN_S),
        ],
        ports=[k.port("metrics", k.METRICS_PORT)],
        livenessProbe=k.tcp_probe("metrics", period_s=15, failures=4),
    )


def _engine_container(
    name: str,
    spec: FleetSpec,
    pool: PoolSpec,
    launch: sglang.Launch,
    *,
    port: int,
    after_worker: bool,
    efa: bool = False,
    ipc_lock: bool = False,
) -> Doc:
    """``efa``: it talks to other nodes (``EFA_PER_GPU`` interfaces a GPU); ``ipc_lock``: it pins RDMA buffers."""
    gpus = launch.gpus_per_node
    memory_gib = math.ceil(pool.gpu.memory_gib * gpus) + _shm_gib(gpus)
    sizing = Sizing(
        cpu=str(CPU_PER_GPU * gpus), memory=f"{memory_gib}Gi", cpu_limit=str(CPU_PER_GPU * gpus),
        memory_limit=f"{memory_gib}Gi", gpus=gpus, efa=EFA_PER_GPU * gpus if efa else 0,
    )
    period = 10
    more: dict[str, Any] = {
        "ports": [k.port(name, port)],
        "startupProbe": k.http_probe("/health", name, period_s=period, failures=ENGINE_STARTUP_S // period),
        "readinessProbe": k.http_probe("/health", name, period_s=5, failures=3, timeout_s=5),
        "livenessProbe": k.http_probe("/health", name, period_s=20, failures=6, timeout_s=10),
    }
    if after_worker:
        more["lifecycle"] = {"preStop": {"sleep": {"seconds": int(parley.WORKER_DRAIN_S) + 5}}}
    out = k.container(
        name,
        spec.images.sglang,
        list(_with_port(launch.argv, port)),
        sizing,
        env=[
            k.env_value("HOME", "/home/sglang"),
            k.env_value("HF_HOME", "/models"),
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": "token", "optional": True}}},
        ],
        mounts=[k.mount("dshm", "/dev/shm"), k.mount("models", "/models"), k.mount("home", "/home/sglang")],
        # Torch, Triton, FlashInfer and DeepGEMM write compile caches wherever they were built to: not read-only.
        read_only_root=False,
        **more,
    )
    if ipc_lock:  # Mooncake registers its KV buffers with the NIC: pinned memory, so root with IPC_LOCK
        out["securityContext"]["capabilities"] = {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    return out


def _rank(leader_engine: Doc) -> Doc:
    """A follower rank: the leader's container without HTTP (ranks > 0 serve none), so without probes."""
    return {
        key: value
        for key, value in leader_engine.items()
        if key not in ("ports", "startupProbe", "readinessProbe", "livenessProbe")
    }


def _with_port(argv: tuple[str, ...], port: int) -> tuple[str, ...]:
    i = argv.index("--port")
    return (*argv[: i + 1], str(port), *argv[i + 2 :])


def _shm_gib(gpus: int) -> int:
    return max(8, SHM_PER_GPU_GIB * gpus)


def _gpu_pod(pool: PoolSpec, containers: list[Doc], account: str, *, grace_s: int, gpus: int, root: bool = False) -> Doc:
    volumes = [
        k.empty_dir("dshm", memory=True, size=f"{_shm_gib(gpus)}Gi"),
        # Weights download here at start; overlay a PersistentVolumeClaim or a node-local cache to keep them.
        k.empty_dir("models", size=f"{math.ceil(pool.weights_gib * 1.25)}Gi"),
        k.empty_dir("home", size="50Gi"),
    ]
    if any(c["name"] == "worker" for c in containers):
        volumes = parley.parley_volumes(*volumes)
    nodes = {k.GPU_PRODUCT_LABEL: pool.gpu.type, k.POOL: pool.name}  # the pool's node groups (infra/terraform)
    return k.pod_spec(containers, service_account=account, grace_s=grace_s, volumes=volumes, gpu_nodes=nodes, root=root)


def _leaders(name: str) -> dict[str, str]:
    return {**k.selector(name), WORKER_INDEX: "0"}


def _leader_worker_set(
    name: str, ns: str, label: dict[str, str], leader: Doc, follower: Doc, size: int, annotations: dict[str, str] | None = None
) -> Doc:
    """Groups of ``size`` pods, one per replica; how many is KEDA's to set (its ScaledObject), so left out here."""
    def template(pod: Doc) -> Doc:
        meta: Doc = {"labels": dict(label)}
        if annotations:
            meta["annotations"] = dict(annotations)
        return {"metadata": meta, "spec": pod}

    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": k.meta(name, ns, label),
        "spec": {
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": size,
                # one rank lost breaks the replica's collective: the whole group restarts together
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template(leader),
                "workerTemplate": template(follower),
            },
        },
    }
