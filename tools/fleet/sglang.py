"""A pool's SGLang launch commands, derived from its spec (pure: tools/fleet/spec.py in, argv out).

Each kind of engine replica (``PoolSpec.engines``) is one ``sglang.launch_server``
command, the same on every replica and, for a replica across nodes, on every
node but for its rank. A disaggregated pool adds its PD router
(``sglang_router.launch_router``), which finds the prefill and decode engines
through the Kubernetes API by the labels below (the replicas come and go with
the autoscaler, so no fixed list could name them) or, outside Kubernetes, from
the URLs given to ``pd_router``. tests/unit/tools/test_fleet_flags.py checks
every flag against the pinned release's own ``ServerArgs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tools.fleet.spec import Phase, PoolSpec

SERVER = ("python3", "-m", "sglang.launch_server")
ROUTER = ("python3", "-m", "sglang_router.launch_router")

#: Where a multi-node replica's ranks meet its leader (torch.distributed), beside the HTTP port.
DIST_INIT_PORT = 20000
#: LeaderWorkerSet's environment in every pod of a group; Kubernetes expands ``$(NAME)`` in container args.
NODE_RANK = "$(LWS_WORKER_INDEX)"
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
#: The router's Prometheus port (its HTTP port serves requests only).
ROUTER_METRICS_PORT = 29000

#: Labels every engine pod carries, which the PD router selects by (the Kubernetes renderer sets them).
POOL_LABEL = "parley.dev/pool"
ROLE_LABEL = "parley.dev/role"
#: Only a group's leader (rank 0) serves HTTP; LeaderWorkerSet labels each pod with its index in the group.
LEADER_LABEL = ("leaderworkerset.sigs.k8s.io/worker-index", "0")
#: The annotation on prefill pods the router reads their bootstrap port from (sglang-router's default name).
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"


@dataclass(frozen=True)
class Launch:
    role: str  # "engine" | "prefill" | "decode" | "router"
    argv: tuple[str, ...]  # the whole command, python3 -m …
    gpus_per_node: int  # 0 for the router
    nodes: int  # nodes one replica spans (1 unless multi-node)
    port: int  # the HTTP port (health, /generate)


def launches(pool: PoolSpec, namespace: str | None = None) -> list[Launch]:
    """Every command a pool runs: its engines, then its PD router if disaggregated (watching ``namespace``)."""
    out = [engine(pool, phase) for phase in pool.engines]
    if pool.disaggregation is not None:
        out.append(pd_router(pool, namespace=namespace))
    return out


def engine(pool: PoolSpec, phase: Phase) -> Launch:
    """``sglang.launch_server`` for one kind of replica of ``pool``."""
    argv = [
        *SERVER,
        "--model-path", pool.model,
        "--served-model-name", pool.served_model_name,
        "--host", "0.0.0.0",
        "--port", str(pool.port),
        *_parallel(phase),
        "--chunked-prefill-size", str(phase.chunked_prefill_size),
        "--schedule-policy", pool.schedule_policy,
        "--max-running-requests", str(phase.max_running_requests),
        "--mem-fraction-static", f"{phase.mem_fraction_static:g}",
        *_priority(pool),
        "--enable-metrics",  # /metrics: the ServiceMonitor's, and queue depth for dashboards
        "--enable-cache-report",  # cached_tokens in every reply's meta_info: Parley's usage and cache hit rate
        # Each /generate event carries only its own text and ids: O(n) per reply, not O(n²) (the workers read
        # the form from /get_server_info, workers/sglang.py).
        "--incremental-streaming-output",
        *_speculative(pool),
        *_disaggregation(pool, phase),
        *_extra(phase.extra_args),
    ]
    return Launch(phase.role, tuple(argv), pool.gpu.per_node, phase.nodes_per_replica, pool.port)


def pd_router(
    pool: PoolSpec,
    prefill_urls: Sequence[str] = (),
    decode_urls: Sequence[str] = (),
    namespace: str | None = None,
) -> Launch:
    """The PD router of a disaggregated pool: static URLs when given, else Kubernetes discovery by label."""
    dis = pool.disaggregation
    if dis is None:
        raise ValueError(f"pool {pool.name} is not disaggregated: it has no PD router")
    argv = [
        *ROUTER,
        "--pd-disaggregation",
        "--host", "0.0.0.0",
        "--port", str(dis.router.port),
        "--policy", dis.router.policy,
        "--prometheus-port", str(ROUTER_METRICS_PORT),
    ]
    if prefill_urls or decode_urls:
        if not (prefill_urls and decode_urls):
            raise ValueError("a static PD router needs both prefill and decode URLs")
        for url in prefill_urls:
            argv += ["--prefill", url, str(dis.bootstrap_port)]
        for url in decode_urls:
            argv += ["--decode", url]
    else:
        argv += [
            "--service-discovery",
            "--service-discovery-port", str(pool.port),
            "--prefill-selector", *_selector(pool, "prefill"),
            "--decode-selector", *_selector(pool, "decode"),
        ]
        if namespace:
            argv += ["--service-discovery-namespace", namespace]
    return Launch("router", tuple(argv), 0, 1, dis.router.port)


def pod_labels(pool: PoolSpec, role: str) -> dict[str, str]:
    """The labels of ``pool``'s ``role`` pods that the router's selectors match (without the leader's)."""
    return {POOL_LABEL: pool.name, ROLE_LABEL: role}


def _selector(pool: PoolSpec, role: str) -> list[str]:
    labels = {**pod_labels(pool, role), LEADER_LABEL[0]: LEADER_LABEL[1]}
    return [f"{key}={value}" for key, value in labels.items()]


def _parallel(phase: Phase) -> list[str]:
    argv = ["--tp-size", str(phase.tp)]
    if phase.dp > 1:
        argv += ["--dp-size", str(phase.dp)]
    if phase.enable_dp_attention:
        argv += ["--enable-dp-attention"]
    if phase.ep > 1:
        argv += ["--ep-size", str(phase.ep)]
    if phase.nodes_per_replica > 1:
        argv += [
            "--nnodes", str(phase.nodes_per_replica),
            "--node-rank", NODE_RANK,
            "--dist-init-addr", f"{LEADER_ADDRESS}:{DIST_INIT_PORT}",
        ]
    return argv


def _priority(pool: PoolSpec) -> list[str]:
    if not pool.priority_scheduling:
        return []
    # Requests that send no priority (what Parley's background callers send) rank lowest; turns send more.
    return ["--enable-priority-scheduling", "--default-priority-value", "0"]


def _speculative(pool: PoolSpec) -> list[str]:
    spec = pool.speculative
    if spec is None:
        return []
    argv = ["--speculative-algorithm", spec.algorithm]
    if spec.draft_model:
        argv += ["--speculative-draft-model-path", spec.draft_model]
    return argv + [
        "--speculative-num-steps", str(spec.num_steps),
        "--speculative-eagle-topk", str(spec.eagle_topk),
        "--speculative-num-draft-tokens", str(spec.num_draft_tokens),
    ]


def _disaggregation(pool: PoolSpec, phase: Phase) -> list[str]:
    dis = pool.disaggregation
    if dis is None:
        return []
    argv = ["--disaggregation-mode", phase.role, "--disaggregation-transfer-backend", dis.transfer_backend]
    if phase.role == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(dis.bootstrap_port)]
    return argv


def _extra(args: tuple[tuple[str, str | None], ...]) -> list[str]:
    out: list[str] = []
    for flag, value in args:
        out += [f"--{flag}"] if value is None else [f"--{flag}", value]
    return out
