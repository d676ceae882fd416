"""The fleet spec: every GPU pool of SGLang engines, declared once (infra/fleet/example.yaml).

    FleetSpec ── images, sglang_release
     └── pools: PoolSpec ── gpu, replicas, the engine shape (tp, dp, ep, …), scheduling, speculative
          └── disaggregation: Disaggregation ── transfer_backend, router
               ├── prefill: Phase   (the pool's shape, with the fields this side sets)
               └── decode:  Phase

``load`` reads the YAML and refuses what SGLang or the cluster would refuse
later, at start-up on a GPU node: unknown keys, wrong types, a parallel layout
that does not match the GPUs, weights that leave no room for the KV cache. Each
error names the field by its path (``pools[2].disaggregation.decode.ep``).
``tools/fleet/sglang.py`` turns a pool into launch commands,
``tools/fleet/kubernetes.py`` into manifests; docs/fleet.md maps each field to
its SGLang flag.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from parley.errors import ConfigError
from schemas.catalog import POOLS, TOPICS, inference_topic
from workers.chat_template import FAMILIES

#: The spec shipped in the repository: `parley fleet plan` with no argument plans it.
EXAMPLE = Path(__file__).resolve().parents[2] / "infra" / "fleet" / "example.yaml"

#: KV transfer between prefill and decode engines: RDMA via Mooncake's transfer engine, or NVIDIA's NIXL.
TRANSFER_BACKENDS = ("mooncake", "nixl")
#: EAGLE3: a separately trained draft head; EAGLE: a draft in the checkpoint (DeepSeek's MTP/NextN layer).
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
#: lpm (longest prefix match) serves first the waiting requests that share most of a cached prefix; fcfs in order
#: of arrival, the one that priority scheduling works with.
SCHEDULE_POLICIES = ("lpm", "fcfs")
#: SGLang asserts it at start-up (ServerArgs.check_server_args): priorities order only fcfs (or lof) queues.
PRIORITY_POLICIES = ("fcfs",)
ROUTER_POLICIES = ("cache_aware", "power_of_two", "round_robin", "random")

#: More SGLang flags, by name without the dashes: a value, or None for a bare switch (tests check each).
ExtraArgs = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class Images:
    parley: str  # gateway, processors and workers
    sglang: str  # engines and the PD router (the SGLang image ships sglang-router)


@dataclass(frozen=True)
class GpuSpec:
    type: str  # the node label value engines are scheduled on (nvidia.com/gpu.product)
    per_node: int  # GPUs one engine pod takes on each of its nodes (nvidia.com/gpu)
    memory_gib: float  # memory of one GPU, for the fit check


@dataclass(frozen=True)
class Range:
    """Replicas between ``min`` and ``max`` (the autoscaler's bounds); a bare number in YAML means both."""

    min: int
    max: int


@dataclass(frozen=True)
class Speculative:
    algorithm: str  # SPECULATIVE_ALGORITHMS
    num_steps: int  # draft steps per verification (--speculative-num-steps)
    eagle_topk: int  # branches kept per draft step (--speculative-eagle-topk)
    num_draft_tokens: int  # tokens verified per step (--speculative-num-draft-tokens)
    draft_model: str | None = None  # None: the draft is in the model's own checkpoint (EAGLE on DeepSeek's MTP head)


@dataclass(frozen=True)
class Phase:
    """The shape of one kind of engine replica: a whole pool's, or one side of a disaggregated pool.

    In YAML a prefill or decode side sets only what differs; the rest is the pool's.
    """

    role: str  # "engine" (not disaggregated), "prefill" or "decode"
    replicas: Range
    nodes_per_replica: int  # > 1: one replica spans nodes (a LeaderWorkerSet group on Kubernetes)
    tp: int  # tensor parallel size over all the replica's GPUs
    dp: int  # data parallel ranks: with dp attention, attention ranks inside the tp group
    ep: int  # expert parallel size (MoE only)
    enable_dp_attention: bool
    chunked_prefill_size: int
    max_running_requests: int
    mem_fraction_static: float  # of each GPU's memory for weights + KV cache
    extra_args: ExtraArgs

    def gpus_per_replica(self, gpu: GpuSpec) -> int:
        return self.nodes_per_replica * gpu.per_node


#: The fields a prefill or decode side inherits from its pool when it does not set them.
PHASE_FIELDS = tuple(f.name for f in dataclasses.fields(Phase) if f.name != "role")


@dataclass(frozen=True)
class Router:
    """The PD router in front of a disaggregated pool: Parley's workers talk to it, it pairs prefill and decode."""

    replicas: int = 1
    port: int = 30000
    policy: str = "cache_aware"  # ROUTER_POLICIES, for both sides


@dataclass(frozen=True)
class Disaggregation:
    transfer_backend: str  # TRANSFER_BACKENDS
    prefill: Phase
    decode: Phase
    router: Router = field(default_factory=Router)
    bootstrap_port: int = 8998  # where prefill engines meet decode engines for each request's KV


@dataclass(frozen=True)
class PoolSpec:
    name: str  # schemas.catalog.POOLS
    model: str  # Hugging Face id or path (--model-path)
    served_model_name: str  # what /get_model_info reports and Parley records
    # The chat template family the model was trained on (workers/chat_template.py FAMILIES): Parley renders
    # the pool's prompts in it (PARLEY_POOL_TEMPLATES), since /generate takes text, not messages.
    template: str
    weights_gib: float  # the weights in memory, all GPUs together (at the dtype served)
    gpu: GpuSpec
    replicas: Range
    tp: int
    chunked_prefill_size: int
    max_running_requests: int
    mem_fraction_static: float
    moe: bool = False  # a mixture-of-experts model: ep is allowed
    nodes_per_replica: int = 1
    dp: int = 1
    ep: int = 1
    enable_dp_attention: bool = False
    schedule_policy: str = "lpm"
    # Requests that send a higher ``priority`` first (interactive turns before titles, summaries, document
    # jobs); needs schedule_policy fcfs, so a pool chooses between it and lpm.
    priority_scheduling: bool = False
    speculative: Speculative | None = None
    disaggregation: Disaggregation | None = None
    engines_per_worker: int = 1  # engine replicas (or routers) one Parley worker process fronts
    port: int = 30000
    extra_args: ExtraArgs = ()

    @property
    def engines(self) -> tuple[Phase, ...]:
        """The kinds of engine replica this pool runs: one "engine", or its "prefill" and "decode" sides."""
        if self.disaggregation is not None:
            return (self.disaggregation.prefill, self.disaggregation.decode)
        return (Phase("engine", **{name: getattr(self, name) for name in PHASE_FIELDS}),)


@dataclass(frozen=True)
class FleetSpec:
    name: str
    namespace: str  # Kubernetes namespace of everything rendered
    images: Images
    sglang_release: str  # the SGLang release the flags are checked against (tests/fixtures/sglang/)
    pools: tuple[PoolSpec, ...]

    def pool(self, name: str) -> PoolSpec:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)


def load(path: Path | None = None) -> FleetSpec:
    """The spec at ``path`` (None: the shipped example), checked; ConfigError names the bad field."""
    path = path or EXAMPLE
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the fleet spec {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"fleet spec {path} is not YAML: {exc}") from exc
    return parse(data, source=str(path))


def parse(data: Any, source: str = "fleet spec") -> FleetSpec:
    """A spec from its YAML data (a dict), checked."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top, got {type(data).__name__}")
    pools = data.get("pools")
    try:
        if isinstance(pools, list):
            data = {**data, "pools": [_with_inherited_phases(p, f"pools[{i}]") for i, p in enumerate(pools)]}
        spec = _build(FleetSpec, data, "")
        _check(spec)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return spec


# ---------------------------------------------------------------- reading


def _with_inherited_phases(pool: Any, path: str) -> Any:
    """A pool's YAML with each disaggregated side completed from the pool's own shape fields."""
    if not isinstance(pool, dict) or not isinstance(pool.get("disaggregation"), dict):
        return pool
    dis = dict(pool["disaggregation"])
    defaults = {f.name: f.default for f in dataclasses.fields(PoolSpec) if f.name in PHASE_FIELDS}
    inherited = {k: pool.get(k, v) for k, v in defaults.items() if k in pool or v is not dataclasses.MISSING}
    for side in ("prefill", "decode"):
        own = dis.get(side, {})
        if not isinstance(own, dict):
            continue  # _build says it is not a mapping
        if "role" in own:
            raise ConfigError(f"{path}.disaggregation.{side}.role: unknown field (the side's name is its role)")
        dis[side] = {**inherited, **own, "role": side}
    return {**pool, "disaggregation": dis}


def _build(cls: type, data: Any, path: str) -> Any:
    """``cls`` from a YAML mapping, every field typed as declared; unknown and missing keys refused by path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'the spec'}: expected a mapping, got {_kind(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{_at(path, unknown[0])}: unknown field (known: {', '.join(fields)})")
    values = {}
    for name, f in fields.items():
        if name in data:
            values[name] = _value(hints[name], data[name], _at(path, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_at(path, name)}: missing")
    return cls(**values)


def _value(hint: Any, raw: Any, path: str) -> Any:
    if hint == ExtraArgs:
        return _extra_args(raw, path)
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType):  # X | None
        if raw is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, raw, path)
    if typing.get_origin(hint) is tuple:  # tuple[X, ...]
        if not isinstance(raw, list):
            raise ConfigError(f"{path}: expected a list, got {_kind(raw)}")
        return tuple(_value(args[0], item, f"{path}[{i}]") for i, item in enumerate(raw))
    if hint is Range and isinstance(raw, int) and not isinstance(raw, bool):
        return _value(Range, {"min": raw, "max": raw}, path)
    if dataclasses.is_dataclass(hint):
        return _build(hint, raw, path)
    if hint is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if not isinstance(raw, hint) or (hint is int and isinstance(raw, bool)):
        raise ConfigError(f"{path}: expected {hint.__name__}, got {_kind(raw)}")
    return raw


def _extra_args(raw: Any, path: str) -> ExtraArgs:
    """``{flag: value}`` (``true`` for a bare switch) → ((flag, value | None), …), in the order written."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of SGLang flag to value, got {_kind(raw)}")
    out = []
    for flag, value in raw.items():
        if not isinstance(flag, str) or flag.startswith("-") or not flag:
            raise ConfigError(f"{path}: flag {flag!r} must be written without its dashes (moe-a2a-backend: deepep)")
        if value is True:
            out.append((flag, None))
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out.append((flag, str(value)))
        else:
            raise ConfigError(f"{_at(path, flag)}: expected a value or true, got {_kind(value)}")
    return tuple(out)


def _at(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(raw: Any) -> str:
    return "nothing" if raw is None else f"{type(raw).__name__} {raw!r}"


# ---------------------------------------------------------------- checking

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _check(spec: FleetSpec) -> None:
    if not _DNS_LABEL.match(spec.namespace):
        raise ConfigError(f"namespace: {spec.namespace!r} is not a Kubernetes namespace name (a DNS label)")
    if not spec.pools:
        raise ConfigError("pools: at least one pool")
    seen: set[str] = set()
    for i, pool in enumerate(spec.pools):
        if pool.name in seen:
            raise ConfigError(f"pools[{i}].name: pool {pool.name!r} is declared twice")
        seen.add(pool.name)
        _check_pool(pool, f"pools[{i}]")


def _check_pool(pool: PoolSpec, path: str) -> None:
    if pool.name not in POOLS:
        raise ConfigError(f"{path}.name: {pool.name!r} is not a pool; pools are {', '.join(POOLS)}")
    if pool.template not in FAMILIES:
        raise ConfigError(f"{path}.template: {pool.template!r} is not one of {FAMILIES} (workers/chat_template.py)")
    _positive(path, engines_per_worker=pool.engines_per_worker)
    _positive(f"{path}.gpu", per_node=pool.gpu.per_node)
    if pool.gpu.memory_gib <= 0:
        raise ConfigError(f"{path}.gpu.memory_gib: must be positive, got {pool.gpu.memory_gib}")
    _port(f"{path}.port", pool.port)
    if pool.schedule_policy not in SCHEDULE_POLICIES:
        raise ConfigError(f"{path}.schedule_policy: {pool.schedule_policy!r} is not one of {SCHEDULE_POLICIES}")
    if pool.priority_scheduling and pool.schedule_policy not in PRIORITY_POLICIES:
        raise ConfigError(
            f"{path}.priority_scheduling: SGLang orders priorities only under schedule_policy"
            f" {' or '.join(PRIORITY_POLICIES)}, not {pool.schedule_policy!r} (it refuses to start);"
            " choose one of the two for this pool"
        )
    # A disaggregated pool's own shape is only what its sides inherit: the sides are checked, not it.
    for phase in pool.engines:
        _check_phase(pool, phase, path if phase.role == "engine" else f"{path}.disaggregation.{phase.role}")
    if pool.speculative is not None:
        _check_speculative(pool.speculative, f"{path}.speculative")
    dis = pool.disaggregation
    _check_workers(pool, path)
    if dis is not None:
        at = f"{path}.disaggregation"
        if dis.transfer_backend not in TRANSFER_BACKENDS:
            raise ConfigError(f"{at}.transfer_backend: {dis.transfer_backend!r} is not one of {TRANSFER_BACKENDS}")
        _port(f"{at}.bootstrap_port", dis.bootstrap_port)
        if dis.bootstrap_port == pool.port:
            raise ConfigError(f"{at}.bootstrap_port: {dis.bootstrap_port} is the engines' HTTP port too")
        _port(f"{at}.router.port", dis.router.port)
        _positive(f"{at}.router", replicas=dis.router.replicas)
        if dis.router.policy not in ROUTER_POLICIES:
            raise ConfigError(f"{at}.router.policy: {dis.router.policy!r} is not one of {ROUTER_POLICIES}")


def _check_phase(pool: PoolSpec, phase: Phase, path: str) -> None:
    """The engine shape: parallel sizes against the replica's GPUs, memory against the weights."""
    r = phase.replicas
    if not 0 <= r.min <= r.max or r.max < 1:
        raise ConfigError(f"{path}.replicas: need 0 <= min <= max and max >= 1, got min={r.min} max={r.max}")
    _positive(
        path, nodes_per_replica=phase.nodes_per_replica, tp=phase.tp, dp=phase.dp, ep=phase.ep,
        chunked_prefill_size=phase.chunked_prefill_size, max_running_requests=phase.max_running_requests,
    )
    gpus = phase.gpus_per_replica(pool.gpu)
    layout = f"nodes_per_replica × gpu.per_node = {phase.nodes_per_replica} × {pool.gpu.per_node} = {gpus} GPUs"
    if phase.enable_dp_attention:
        if phase.tp != gpus:
            raise ConfigError(f"{path}.tp: with dp attention tp spans the replica's GPUs ({layout}), got {phase.tp}")
        if phase.dp < 2 or phase.tp % phase.dp:
            raise ConfigError(f"{path}.dp: dp attention needs dp > 1 dividing tp={phase.tp}, got {phase.dp}")
    elif phase.tp * phase.dp != gpus:
        raise ConfigError(f"{path}.tp: tp × dp = {phase.tp} × {phase.dp} must equal the replica's {layout}")
    if phase.ep > 1:
        if not pool.moe:
            raise ConfigError(f"{path}.ep: expert parallelism on a dense model ({pool.model} has moe: false)")
        if phase.tp % phase.ep:
            raise ConfigError(f"{path}.ep: ep={phase.ep} must divide tp={phase.tp}")
    if not 0 < phase.mem_fraction_static < 1:
        raise ConfigError(f"{path}.mem_fraction_static: must be between 0 and 1, got {phase.mem_fraction_static}")
    # A necessary condition only: dp attention replicates the attention weights on every rank, which
    # docs/fleet.md counts by hand for the frontier pool.
    per_gpu = pool.weights_gib / gpus
    budget = phase.mem_fraction_static * pool.gpu.memory_gib
    if per_gpu >= budget:
        raise ConfigError(
            f"{path}.mem_fraction_static: weights_gib {pool.weights_gib:g} / {gpus} GPUs = {per_gpu:.1f} GiB per GPU"
            f" leaves no KV cache in mem_fraction_static × gpu.memory_gib = {budget:.1f} GiB;"
            " raise mem_fraction_static, or give the replica more GPUs"
        )


def _check_workers(pool: PoolSpec, path: str) -> None:
    """Each engine a worker fronts is its own member of the pool's consumer group (PARLEY_WORKER_ENGINE_URLS):
    members beyond the partitions of the pool's topic get none, and their GPUs sit idle."""
    dis = pool.disaggregation
    fronted, what = (dis.router.replicas, "disaggregation.router.replicas") if dis else (pool.replicas.max, "replicas.max")
    topic = inference_topic(pool.name)
    partitions = TOPICS[topic].partitions
    if fronted > partitions:
        raise ConfigError(
            f"{path}.{what}: {fronted} engines would each join workers.{pool.name}, more than the {partitions}"
            f" partitions of {topic} (schemas/catalog.py) that share them out; raise the partitions first"
        )


def _check_speculative(spec: Speculative, path: str) -> None:
    if spec.algorithm not in SPECULATIVE_ALGORITHMS:
        raise ConfigError(f"{path}.algorithm: {spec.algorithm!r} is not one of {SPECULATIVE_ALGORITHMS}")
    if spec.algorithm == "EAGLE3" and not spec.draft_model:
        raise ConfigError(f"{path}.draft_model: EAGLE3 needs its trained draft model")
    _positive(path, num_steps=spec.num_steps, eagle_topk=spec.eagle_topk, num_draft_tokens=spec.num_draft_tokens)
    # SGLang overrides the count silently when topk is 1 (a chain): say so here instead.
    if spec.eagle_topk == 1 and spec.num_draft_tokens != spec.num_steps + 1:
        raise ConfigError(
            f"{path}.num_draft_tokens: with eagle_topk 1 it must be num_steps + 1 = {spec.num_steps + 1},"
            f" got {spec.num_draft_tokens}"
        )


def _positive(path: str, **values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ConfigError(f"{_at(path, name)}: must be at least 1, got {value}")


def _port(path: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise ConfigError(f"{path}: {port} is not a TCP port")
