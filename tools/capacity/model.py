"""The capacity model: a load in, the fleet it needs out. Pure arithmetic over plain data (no I/O).

Every figure follows from the inputs by a line of arithmetic that docs/capacity.md writes out:
messages/s from users, tokens/s from messages, GPUs from tokens/s and each GPU's rate, live
generations by Little's law, and Parley's own processes from the figures its benchmarks measured
(``Measured``; a figure not measured yet leaves what needs it ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas import events as ev
from schemas.catalog import POOLS, TOPICS, inference_topic

DAY_S = 86_400
WEEK_S = 7 * DAY_S

# What a reply looks like on the wire and in the tables: Parley's defaults and measured sizes, cited.
CHARS_PER_TOKEN = 4.0  # English text, roughly
SEALED_PER_CHAR = 4 / 3  # content is sealed (AES-GCM, base64: DESIGN.md §12), so it does not compress either
EVENT_BYTES = 300  # one event's ids, timestamps and Avro framing, content aside
TOKEN_RECORD_BYTES = 310  # a chat.tokens record on the wire (docs/operations.md, "chat.tokens at seed scale")
COALESCE_S = 0.080  # PARLEY_WORKER_COALESCE_MS: a stream's tokens share a record for this long ...
COALESCE_TOKENS = 32  # ... or until PARLEY_WORKER_COALESCE_TOKENS of them
MODERATION_WINDOW_TOKENS = 200  # PARLEY_MODERATION_WINDOW_TOKENS: a reply is checked every this many tokens
CHECKPOINT_S = 1.0  # PARLEY_MATERIALIZER_CHECKPOINT_MIN_S: a streaming reply's text is written about this often
CANCEL_RATE = 0.05  # replies stopped by their user (the sample log's rate): chat.control records
CHAT_EVENTS_PER_MESSAGE = 3  # MessagePosted, GenerationRequested, GenerationCompleted
SHARD_PARTITIONS = 4  # chat.tokens partitions per gateway shard (docs/operations.md: m >= 4)


@dataclass(frozen=True)
class Measured:
    """Parley's own figures, read from ``bench/results/*.json`` (tools/capacity/measured.py); None: not measured."""

    streams_per_gateway: float | None = None  # bench.fanout: SSE streams one gateway process serves within its lag bar
    materializer_events_per_s: float | None = None  # bench.processors: chat.events one materializer instance projects
    context_events_per_s: float | None = None  # bench.processors: chat.events one context builder instance folds
    node_writes_per_s: float | None = None  # bench.replay: writes/s one Cassandra node took (the driver's ceiling)
    projection_writes_per_message: float | None = None  # bench.replay: the rebuild's writes per posted message
    write_through_writes_per_message: float | None = None  # bench.replay: of those, what the gateway writes too
    disk_bytes_per_message: float | None = None  # bench.storage: on disk per posted message with a reply of no text
    disk_bytes_per_reply_token: float | None = None  # bench.storage: and per token of its reply


@dataclass(frozen=True)
class Inputs:
    """A load and the assumptions it is planned under. The defaults are seed 004's (docs/capacity.md)."""

    users: float = 100e6  # active in each period
    messages_per_user: float = 10.0  # per period
    period_s: float = WEEK_S
    peak_factor: float = 3.0  # peak messages/s ÷ average (seed 004: ~5k ÷ ~1.6k)
    output_tokens: float = 500.0  # per reply
    input_tokens: float = 1000.0  # per prompt (system, memory, summary, recent turns)
    cache_hit_rate: float = 0.5  # share of input tokens found in the prefix cache
    pool_mix: Mapping[str, float] = field(default_factory=lambda: {"small": 1.0})  # share of messages per pool
    decode_tokens_per_gpu: Mapping[str, float] = field(default_factory=lambda: {p: 2500.0 for p in POOLS})
    prefill_tokens_per_gpu: Mapping[str, float] = field(default_factory=lambda: {p: 10_000.0 for p in POOLS})
    disaggregated: bool = False  # prefill and decode on GPUs of their own
    ttft_s: float = 1.0  # the SLO: time to first token
    stream_tokens_per_s: float = 30.0  # the SLO: tokens/s each stream is decoded at
    headroom: float = 0.2  # capacity above the need, every fleet
    spare_replicas: int = 1  # N+1: whole engine replicas per pool (and role) on top of the headroom
    gpus_per_replica: int = 8
    gpu_hour_usd: float = 2.93  # seed 000's bill: $5.2M a day ÷ (74,000 GPUs × 24 h)
    replication_factor: int = 3  # Cassandra
    retention_days: float = 365.0  # how long conversations are kept
    disk_per_node_gb: float = 2000.0
    disk_fill: float = 0.5  # the share of a node's disk data may fill (compaction needs the rest)
    partition_records_per_s: float = 10_000.0  # a Kafka partition's budget (docs/operations.md; not measured)
    partition_mb_per_s: float = 3.0
    measured: Measured = field(default_factory=Measured)

    def __post_init__(self) -> None:
        for name in ("users", "messages_per_user", "period_s", "output_tokens", "ttft_s", "stream_tokens_per_s",
                     "gpus_per_replica", "gpu_hour_usd", "replication_factor", "retention_days", "disk_per_node_gb",
                     "partition_records_per_s", "partition_mb_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("input_tokens", "headroom", "spare_replicas"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.peak_factor < 1:
            raise ValueError(f"peak_factor is peak ÷ average and must be at least 1, got {self.peak_factor}")
        if not 0 <= self.cache_hit_rate < 1:
            raise ValueError(f"cache_hit_rate must be in [0, 1), got {self.cache_hit_rate}")
        if not 0 < self.disk_fill <= 1:
            raise ValueError(f"disk_fill must be in (0, 1], got {self.disk_fill}")
        unknown = sorted(set(self.pool_mix) - set(POOLS))
        if unknown:
            raise ValueError(f"unknown pool {', '.join(unknown)} in the pool mix; pools are {', '.join(POOLS)}")
        if any(s < 0 for s in self.pool_mix.values()) or not math.isclose(sum(self.pool_mix.values()), 1.0, abs_tol=1e-6):
            raise ValueError(f"the pool mix's shares must be non-negative and add up to 1, got {dict(self.pool_mix)}")
        for name in ("decode_tokens_per_gpu", "prefill_tokens_per_gpu"):
            rates = getattr(self, name)
            for pool, share in self.pool_mix.items():
                if share > 0 and not rates.get(pool, 0) > 0:
                    raise ValueError(f"{name} needs a positive rate for the {pool} pool, got {rates.get(pool)}")


@dataclass(frozen=True)
class PoolPlan:
    """One pool's GPUs. ``*_gpus`` are exact needs before redundancy; ``*_after`` whole GPUs after it."""

    pool: str
    peak_messages_per_s: float
    output_tokens_per_s: float  # at peak
    prefill_tokens_per_s: float  # at peak, what the prefix cache does not hold
    concurrent_generations: float  # at peak (Little's law)
    decode_gpus: float
    prefill_gpus: float
    gpus_before: int  # whole GPUs before redundancy: per role when disaggregated, for both together when not
    decode_gpus_after: int  # disaggregated: the decode GPUs; colocated: every GPU of the pool
    prefill_gpus_after: int  # disaggregated: the prefill GPUs; colocated: 0 (they share the decode GPUs)
    streams_per_decode_gpu: float  # the batch each decode GPU holds at the SLO's tokens/s per stream
    one_prompt_prefill_s: float  # the uncached part of one prompt at one GPU's prefill rate (vs the TTFT SLO)
    replicas: int  # engine replicas (gpus_per_replica each), a worker each: chat.inference.<pool> partitions

    @property
    def gpus_after(self) -> int:
        return self.decode_gpus_after + self.prefill_gpus_after


@dataclass(frozen=True)
class TopicPlan:
    topic: str
    records_per_s: float  # at peak
    bytes_per_s: float  # at peak, estimated from the sizes above
    partitions: int
    bound: str  # what set the count: throughput, a consumer group's instances, gateway shards, the catalog
    catalog_partitions: int  # what schemas/catalog.py has today


@dataclass(frozen=True)
class ParleySizing:
    """Parley's own processes for the load, from measured figures; None where one is missing."""

    gateway_pods: int | None
    materializer_instances: int | None
    context_instances: int | None
    writes_per_message: float | None  # Cassandra writes per posted message: projection + write-through + checkpoints
    peak_replica_writes_per_s: float | None  # every replica's write counted
    cassandra_nodes_for_writes: int | None
    stored_tb: float | None  # on disk over the retention, every replica
    cassandra_nodes_for_storage: int | None

    @property
    def cassandra_nodes(self) -> int | None:
        if self.cassandra_nodes_for_writes is None or self.cassandra_nodes_for_storage is None:
            return None
        return max(self.cassandra_nodes_for_writes, self.cassandra_nodes_for_storage)


@dataclass(frozen=True)
class Plan:
    average_messages_per_s: float
    peak_messages_per_s: float
    output_tokens_per_s: float  # at peak, every pool
    prefill_tokens_per_s: float
    concurrent_generations: float
    pools: tuple[PoolPlan, ...]
    topics: tuple[TopicPlan, ...]
    parley: ParleySizing
    replication_factor: int
    gpu_hour_usd: float

    @property
    def decode_gpus(self) -> float:
        return sum(p.decode_gpus for p in self.pools)

    @property
    def gpus_before(self) -> int:
        return sum(p.gpus_before for p in self.pools)

    @property
    def gpus_after(self) -> int:
        return sum(p.gpus_after for p in self.pools)

    @property
    def gpu_hours_per_day(self) -> float:
        return self.gpus_after * 24.0

    @property
    def usd_per_day(self) -> float:
        return self.gpu_hours_per_day * self.gpu_hour_usd


def _whole(need: float) -> int:
    """Whole units for ``need`` (a hair of float error above an integer is not another unit)."""
    return math.ceil(need - 1e-9)


def _with_redundancy(need: float, inputs: Inputs) -> int:
    """Whole GPUs for ``need``: the headroom on top, then N+1 replicas; none for no need."""
    if need <= 0:
        return 0
    return _whole(need * (1 + inputs.headroom)) + inputs.spare_replicas * inputs.gpus_per_replica


def _instances(rate_per_s: float, per_instance_per_s: float | None, inputs: Inputs) -> int | None:
    if per_instance_per_s is None or per_instance_per_s <= 0:
        return None
    return max(1, _whole(rate_per_s * (1 + inputs.headroom) / per_instance_per_s))


def pool_plan(pool: str, share: float, peak_per_s: float, inputs: Inputs) -> PoolPlan:
    messages = peak_per_s * share
    output = messages * inputs.output_tokens
    prefill = messages * inputs.input_tokens * (1 - inputs.cache_hit_rate)
    decode_rate, prefill_rate = inputs.decode_tokens_per_gpu[pool], inputs.prefill_tokens_per_gpu[pool]
    decode_gpus, prefill_gpus = output / decode_rate, prefill / prefill_rate
    if inputs.disaggregated:
        before = _whole(decode_gpus) + _whole(prefill_gpus)
        decode_after, prefill_after = _with_redundancy(decode_gpus, inputs), _with_redundancy(prefill_gpus, inputs)
    else:  # one GPU does both, its time shared between them
        before = _whole(decode_gpus + prefill_gpus)
        decode_after, prefill_after = _with_redundancy(decode_gpus + prefill_gpus, inputs), 0
    return PoolPlan(
        pool=pool,
        peak_messages_per_s=messages,
        output_tokens_per_s=output,
        prefill_tokens_per_s=prefill,
        concurrent_generations=messages * (inputs.ttft_s + inputs.output_tokens / inputs.stream_tokens_per_s),
        decode_gpus=decode_gpus,
        prefill_gpus=prefill_gpus,
        gpus_before=before,
        decode_gpus_after=decode_after,
        prefill_gpus_after=prefill_after,
        streams_per_decode_gpu=decode_rate / inputs.stream_tokens_per_s,
        one_prompt_prefill_s=inputs.input_tokens * (1 - inputs.cache_hit_rate) / prefill_rate,
        replicas=math.ceil(decode_after / inputs.gpus_per_replica),
    )


def records_per_token(stream_tokens_per_s: float) -> float:
    """chat.tokens records per streamed token: a stream's tokens share a record for COALESCE_S (workers/coalesce.py).
    At 30 tokens/s, 1 / 2.4 = 0.42: what bench.gateways measured (docs/operations.md)."""
    return 1.0 / min(COALESCE_TOKENS, max(1.0, stream_tokens_per_s * COALESCE_S))


def topic_traffic(inputs: Inputs, peak_per_s: float) -> dict[str, tuple[float, float]]:
    """(records/s, bytes/s) at peak of each topic that carries every turn; the others are not per turn."""
    prompt = EVENT_BYTES + inputs.input_tokens * CHARS_PER_TOKEN * SEALED_PER_CHAR  # InferenceRequested/Routed
    reply = inputs.output_tokens * CHARS_PER_TOKEN * SEALED_PER_CHAR
    chunks = inputs.output_tokens * records_per_token(inputs.stream_tokens_per_s) + 1  # the final chunk
    checks = 1 + inputs.output_tokens / MODERATION_WINDOW_TOKENS  # the input, then the reply's windows
    per_message = {
        "chat.events": (CHAT_EVENTS_PER_MESSAGE, CHAT_EVENTS_PER_MESSAGE * EVENT_BYTES + reply),
        "chat.inference": (1.0, prompt),
        "chat.tokens": (chunks, chunks * TOKEN_RECORD_BYTES),
        "chat.control": (CANCEL_RATE, CANCEL_RATE * EVENT_BYTES),
        "chat.moderation": (checks, checks * EVENT_BYTES),
        "chat.usage": (1.0, EVENT_BYTES),
        **{inference_topic(p): (share, share * prompt) for p in POOLS if (share := inputs.pool_mix.get(p, 0.0))},
    }
    return {t: (n * peak_per_s, b * peak_per_s) for t, (n, b) in per_message.items()}


def topic_plans(inputs: Inputs, peak_per_s: float, pools: tuple[PoolPlan, ...], parley: ParleySizing) -> tuple[TopicPlan, ...]:
    traffic = topic_traffic(inputs, peak_per_s)
    consumers: dict[str, list[tuple[int | None, str]]] = {
        "chat.events": [(parley.materializer_instances, "materializer instances"), (parley.context_instances, "context instances")],
        "chat.tokens": [(None if parley.gateway_pods is None else SHARD_PARTITIONS * parley.gateway_pods, "gateway shards × 4")],
        **{inference_topic(p.pool): [(p.replicas, "workers (one per replica)")] for p in pools},
    }
    out = []
    for name, topic in TOPICS.items():
        if ev.DeadLetter in topic.events:
            continue  # one partition each: a dead letter is rare by design
        if name not in traffic:
            why = "no turns in this pool mix" if name.startswith("chat.inference.") else "not per turn"
            out.append(TopicPlan(name, 0.0, 0.0, topic.partitions, f"{why}: the catalog's", topic.partitions))
            continue
        records, size = traffic[name]
        bounds = [
            (math.ceil(records / inputs.partition_records_per_s), "records per partition"),
            (math.ceil(size / (inputs.partition_mb_per_s * 1e6)), "megabytes per partition"),
            *((n, why) for n, why in consumers.get(name, []) if n is not None),
        ]
        partitions, bound = max(bounds, key=lambda b: b[0])
        out.append(TopicPlan(name, records, size, max(1, partitions), bound, topic.partitions))
    return tuple(out)


def parley_sizing(inputs: Inputs, average_per_s: float, peak_per_s: float, concurrent: float) -> ParleySizing:
    m = inputs.measured
    events_per_s = peak_per_s * CHAT_EVENTS_PER_MESSAGE
    writes = replica_writes = nodes_for_writes = None
    if m.projection_writes_per_message is not None and m.write_through_writes_per_message is not None:
        checkpoints = inputs.output_tokens / inputs.stream_tokens_per_s / CHECKPOINT_S  # one a second while streaming
        writes = m.projection_writes_per_message + m.write_through_writes_per_message + checkpoints
        replica_writes = peak_per_s * writes * inputs.replication_factor
        per_node = _instances(replica_writes, m.node_writes_per_s, inputs)
        nodes_for_writes = None if per_node is None else max(inputs.replication_factor, per_node)
    stored = nodes_for_storage = None
    if m.disk_bytes_per_message is not None and m.disk_bytes_per_reply_token is not None:
        per_message = m.disk_bytes_per_message + m.disk_bytes_per_reply_token * inputs.output_tokens
        stored = average_per_s * DAY_S * inputs.retention_days * per_message * inputs.replication_factor
        usable = inputs.disk_per_node_gb * 1e9 * inputs.disk_fill
        nodes_for_storage = max(inputs.replication_factor, math.ceil(stored / usable))
    return ParleySizing(
        gateway_pods=_instances(concurrent, m.streams_per_gateway, inputs),
        materializer_instances=_instances(events_per_s, m.materializer_events_per_s, inputs),
        context_instances=_instances(events_per_s, m.context_events_per_s, inputs),
        writes_per_message=writes,
        peak_replica_writes_per_s=replica_writes,
        cassandra_nodes_for_writes=nodes_for_writes,
        stored_tb=None if stored is None else stored / 1e12,
        cassandra_nodes_for_storage=nodes_for_storage,
    )


def plan(inputs: Inputs) -> Plan:
    average = inputs.users * inputs.messages_per_user / inputs.period_s
    peak = average * inputs.peak_factor
    pools = tuple(pool_plan(p, share, peak, inputs) for p, share in inputs.pool_mix.items() if share > 0)
    concurrent = sum(p.concurrent_generations for p in pools)
    parley = parley_sizing(inputs, average, peak, concurrent)
    return Plan(
        average_messages_per_s=average,
        peak_messages_per_s=peak,
        output_tokens_per_s=sum(p.output_tokens_per_s for p in pools),
        prefill_tokens_per_s=sum(p.prefill_tokens_per_s for p in pools),
        concurrent_generations=concurrent,
        pools=pools,
        topics=topic_plans(inputs, peak, pools, parley),
        parley=parley,
        replication_factor=inputs.replication_factor,
        gpu_hour_usd=inputs.gpu_hour_usd,
    )
