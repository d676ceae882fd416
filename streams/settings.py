"""Settings of the stream processors, read from the environment at start-up.

Kafka and Cassandra addresses come from ``parley.settings`` (PARLEY_KAFKA_*,
PARLEY_CASSANDRA_*, PARLEY_KEYSPACE, PARLEY_TOPIC_PREFIX); these are the
processors' own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parley.errors import ConfigError
from parley.settings import REPO_ROOT, env
from schemas.catalog import POOLS

#: What `make run`'s CPU engine serves (workers/engine/packaged_model.py): the pools' default model.
LOCAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class StreamsSettings:
    """What every processor shares."""

    datadir: Path = env(
        "PARLEY_STREAMS_DATADIR", REPO_ROOT / ".data" / "streams", "faust state directory; each processor uses a subfolder"
    )
    group_prefix: str = env(
        "PARLEY_STREAMS_GROUP_PREFIX",
        "",
        "Prefix of every processor's consumer group; a new prefix re-reads the topics from the start (replay)",
    )
    session_timeout_s: float = env(
        "PARLEY_STREAMS_SESSION_TIMEOUT_S",
        15.0,
        "How long a processor that died without leaving its group keeps its partitions before the group moves them "
        "(Kafka's session timeout; at least the broker's group.min.session.timeout.ms, 6 s by default)",
    )
    lanes: int = env(
        "PARLEY_STREAMS_LANES",
        32,
        "Events each agent handles at once, in order per key (conversation) and concurrently across keys"
        " (streams/lanes.py); 1 handles one event at a time",
    )

    def __post_init__(self) -> None:
        if self.lanes < 1:
            raise ConfigError(f"PARLEY_STREAMS_LANES must be at least 1, got {self.lanes}")

    def group(self, processor: str) -> str:
        return f"{self.group_prefix}streams.{processor}"


@dataclass(frozen=True)
class ContextSettings:
    """The context builder's: prompt layout, token budget, block dropping and summaries."""

    system_prompt: str = env(
        "PARLEY_CONTEXT_SYSTEM_PROMPT", "You are a helpful assistant.", "System prompt put first in every prompt"
    )
    budget_tokens: int = env(
        "PARLEY_CONTEXT_BUDGET_TOKENS", 3072, "Token budget of a prompt (system prompt included); older turns are left out, as they are once a prompt would outgrow a Kafka record (512 KiB sealed)"
    )
    max_tokens: int = env(
        "PARLEY_CONTEXT_MAX_TOKENS",
        512,
        "Cap on generated tokens when a turn of Parley's own API names none (an OpenAI-API turn has none: the pool's context)",
    )
    cache_conversations: int = env(
        "PARLEY_CONTEXT_CACHE_CONVERSATIONS", 10_000, "Conversations kept in memory; others are reloaded from Cassandra"
    )
    parent_wait_s: float = env(
        "PARLEY_CONTEXT_PARENT_WAIT_S",
        15.0,
        "On a conversation reloaded from Cassandra, how long to wait for the materializer to write the message being answered",
    )
    tokenizer: str = env(
        "PARLEY_CONTEXT_TOKENIZER",
        "smollm2",
        "Tokenizer the budget is counted in, the engine's: smollm2 (the CPU engine's default model), bytes (its random "
        "test model), words (its synthetic backend) or a local HuggingFace model directory",
    )
    drop_fraction: float = env(
        "PARLEY_CONTEXT_DROP_FRACTION",
        0.25,
        "When the history outgrows the budget, the oldest whole turns are dropped in blocks of at least this share "
        "of the budget, so the prompt's prefix (the engine's cache) stays stable for many turns between moves",
    )
    summary_url: str = env(
        "PARLEY_CONTEXT_SUMMARY_URL",
        "http://127.0.0.1:30000",
        "Engine (SGLang API) of the small pool that summarises dropped turns; empty = no summaries",
    )
    summary_tokens: int = env(
        "PARLEY_CONTEXT_SUMMARY_TOKENS",
        256,
        "Tokens reserved in the budget for the summary of dropped turns (the summary is cut to fit)",
    )
    summary_timeout_s: float = env(
        "PARLEY_CONTEXT_SUMMARY_TIMEOUT_S",
        30.0,
        "Longest one summary request may take (turns never wait for it: it is written beside them, for later turns)",
    )
    summary_retry_s: float = env(
        "PARLEY_CONTEXT_SUMMARY_RETRY_S",
        30.0,
        "After the summary engine failed, turns are built without a new summary for this long before it is asked again",
    )
    summary_max_steps: int = env(
        "PARLEY_CONTEXT_SUMMARY_MAX_STEPS",
        4,
        "Most blocks summarised (one engine call each) for one window move; older blocks beyond that are left out of the summary",
    )

    def __post_init__(self) -> None:
        if self.budget_tokens <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_BUDGET_TOKENS must be positive, got {self.budget_tokens}")
        if not 0 < self.drop_fraction <= 1:
            raise ConfigError(f"PARLEY_CONTEXT_DROP_FRACTION must be in (0, 1], got {self.drop_fraction}")
        if not 0 < self.summary_tokens < self.budget_tokens // 2:
            raise ConfigError(
                "PARLEY_CONTEXT_SUMMARY_TOKENS must be positive and under half of PARLEY_CONTEXT_BUDGET_TOKENS, "
                f"got {self.summary_tokens} of {self.budget_tokens}"
            )
        if self.summary_timeout_s <= 0 or self.summary_retry_s < 0:
            raise ConfigError(
                "PARLEY_CONTEXT_SUMMARY_TIMEOUT_S must be positive and PARLEY_CONTEXT_SUMMARY_RETRY_S not negative, "
                f"got {self.summary_timeout_s} and {self.summary_retry_s}"
            )
        if self.summary_max_steps <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_SUMMARY_MAX_STEPS must be positive, got {self.summary_max_steps}")
        if self.max_tokens <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_MAX_TOKENS must be positive, got {self.max_tokens}")
        if self.cache_conversations <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_CACHE_CONVERSATIONS must be positive, got {self.cache_conversations}")


@dataclass(frozen=True)
class RouterSettings:
    pools: str = env(
        "PARLEY_ROUTER_POOLS",
        f"small={LOCAL_MODEL},medium={LOCAL_MODEL},frontier={LOCAL_MODEL}",
        "Pools the router may use and the model each one's engines serve: pool=model[,pool=model…] (the default is "
        "the local stack's: one CPU engine serving SmolLM2 to every pool; a worker's heartbeat naming another model is "
        "a warning, and turns record what the engine serves)",
    )
    default_pool: str = env("PARLEY_ROUTER_DEFAULT_POOL", "small", "Pool of a turn no rule places elsewhere")
    context_tokens: str = env(
        "PARLEY_ROUTER_CONTEXT_TOKENS",
        "small=8192,medium=8192,frontier=8192",
        "Context length of each pool's model, pool=tokens[,…]; a turn whose prompt + max_tokens exceeds it goes to a larger pool",
    )
    capabilities: str = env(
        "PARLEY_ROUTER_CAPABILITIES",
        "small=chat,medium=chat+code+math,frontier=chat+code+math",
        "What each pool's model is trusted with, pool=cap+cap[,…] (chat, code, math); a turn needing one skips pools without it",
    )
    medium_score: float = env("PARLEY_ROUTER_MEDIUM_SCORE", 2.0, "Classifier score at or above which a turn needs medium")
    frontier_score: float = env(
        "PARLEY_ROUTER_FRONTIER_SCORE", 3.5, "Classifier score at or above which a turn needs frontier"
    )
    conversations: int = env(
        "PARLEY_ROUTER_CONVERSATIONS",
        200_000,
        "Conversations whose pool and home partition are remembered (in memory, LRU; forgotten on restart)",
    )
    balance_abs: float = env(
        "PARLEY_ROUTER_BALANCE_ABS", 4.0, "A home worker is hot when its load exceeds the coolest's by more than this many requests…"
    )
    balance_rel: float = env("PARLEY_ROUTER_BALANCE_REL", 1.5, "…and by more than this factor")
    heartbeat_expiry_s: float = env(
        "PARLEY_ROUTER_HEARTBEAT_EXPIRY_S",
        6.0,
        "A worker not heard from for this long is gone (about 3 × PARLEY_WORKER_HEARTBEAT_S)",
    )
    busy: float = env("PARLEY_ROUTER_BUSY", 0.8, "Pool pressure (demand / capacity) above which free turns are downgraded")
    queue_limit: float = env("PARLEY_ROUTER_QUEUE_LIMIT", 1.25, "Pool pressure beyond which free turns are shed")
    paid_limit: float = env(
        "PARLEY_ROUTER_PAID_LIMIT", 2.0, "Pool pressure beyond which paid turns are shed too (their reserved share)"
    )
    retry_after_s: float = env("PARLEY_ROUTER_RETRY_AFTER_S", 10.0, "Shortest retry_after told to a shed turn")
    backlog_every_s: float = env(
        "PARLEY_ROUTER_BACKLOG_EVERY_S",
        1.0,
        "How often the router reads the pools' Kafka backlog (end offsets); 0: never (admission on heartbeats alone)",
    )
    backlog_stale_s: float = env(
        "PARLEY_ROUTER_BACKLOG_STALE_S",
        5.0,
        "A backlog reading older than this is not used: admission falls back to the heartbeats alone",
    )

    def __post_init__(self) -> None:
        if self.conversations <= 0:
            raise ConfigError(f"PARLEY_ROUTER_CONVERSATIONS must be positive, got {self.conversations}")
        if not 0 < self.medium_score <= self.frontier_score:
            raise ConfigError("PARLEY_ROUTER_MEDIUM_SCORE must be positive and at most PARLEY_ROUTER_FRONTIER_SCORE")
        if self.balance_abs < 0 or self.balance_rel < 1:
            raise ConfigError("PARLEY_ROUTER_BALANCE_ABS must be >= 0 and PARLEY_ROUTER_BALANCE_REL >= 1")
        if self.heartbeat_expiry_s <= 0:
            raise ConfigError(f"PARLEY_ROUTER_HEARTBEAT_EXPIRY_S must be positive, got {self.heartbeat_expiry_s}")
        if self.backlog_every_s < 0 or (self.backlog_every_s > 0 and self.backlog_stale_s <= self.backlog_every_s):
            raise ConfigError(
                "need PARLEY_ROUTER_BACKLOG_EVERY_S 0 (off) or below PARLEY_ROUTER_BACKLOG_STALE_S, "
                f"got {self.backlog_every_s}, {self.backlog_stale_s}"
            )
        if not 0 < self.busy <= self.queue_limit <= self.paid_limit:
            raise ConfigError(
                "need 0 < PARLEY_ROUTER_BUSY <= PARLEY_ROUTER_QUEUE_LIMIT <= PARLEY_ROUTER_PAID_LIMIT, "
                f"got {self.busy}, {self.queue_limit}, {self.paid_limit}"
            )

    @staticmethod
    def _pool_map(variable: str, raw: str, what: str) -> dict[str, str]:
        """``pool=value[,pool=value…]`` parsed, every pool checked against the catalog."""
        out: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in raw.split(","))):
            pool, sep, value = item.partition("=")
            pool, value = pool.strip(), value.strip()
            if not sep or not value:
                raise ConfigError(f"{variable}: {item!r} is not pool={what}")
            if pool not in POOLS:
                raise ConfigError(f"{variable}: unknown pool {pool!r}; the catalog has {POOLS}")
            out[pool] = value
        return out

    def pool_models(self) -> dict[str, str]:
        """``pools`` parsed and checked against the topic catalog."""
        out = self._pool_map("PARLEY_ROUTER_POOLS", self.pools, "model")
        if self.default_pool not in out:
            raise ConfigError(
                f"PARLEY_ROUTER_DEFAULT_POOL={self.default_pool!r} is not among PARLEY_ROUTER_POOLS ({sorted(out)})"
            )
        return out

    def pool_context_tokens(self) -> dict[str, int]:
        out = {}
        for pool, raw in self._pool_map("PARLEY_ROUTER_CONTEXT_TOKENS", self.context_tokens, "tokens").items():
            if not raw.isdigit() or int(raw) <= 0:
                raise ConfigError(f"PARLEY_ROUTER_CONTEXT_TOKENS: {pool}={raw!r} is not a positive number of tokens")
            out[pool] = int(raw)
        return out

    def pool_capabilities(self) -> dict[str, frozenset[str]]:
        return {
            pool: frozenset(c.strip() for c in raw.split("+") if c.strip())
            for pool, raw in self._pool_map("PARLEY_ROUTER_CAPABILITIES", self.capabilities, "cap+cap").items()
        }


@dataclass(frozen=True)
class MaterializerSettings:
    cache_conversations: int = env(
        "PARLEY_MATERIALIZER_CACHE_CONVERSATIONS",
        10_000,
        "Conversations kept in memory; others are reloaded from Cassandra",
    )
    retry_max_s: float = env(
        "PARLEY_MATERIALIZER_RETRY_MAX_S", 30.0, "Longest pause between retries of a failed Cassandra write"
    )

    checkpoint_min_s: float = env(
        "PARLEY_MATERIALIZER_CHECKPOINT_MIN_S",
        1.0,
        "Shortest time between two checkpoints (partial text written to messages) of one streaming reply",
    )
    checkpoint_max_s: float = env(
        "PARLEY_MATERIALIZER_CHECKPOINT_MAX_S",
        2.0,
        "Longest a streaming reply's new text waits before a checkpoint writes it (must exceed the minimum)",
    )
    fetch_wait_ms: int = env(
        "PARLEY_MATERIALIZER_FETCH_WAIT_MS",
        100,
        "How long a fetch may wait to fill (64 KiB) before the materializer gets it: fewer, larger batches of"
        " token chunks; rows and checkpoints land up to this much later (the gateway writes a turn's rows itself)",
    )
    live_replies: int = env(
        "PARLEY_MATERIALIZER_LIVE_REPLIES",
        10_000,
        "Streaming replies whose text is kept in memory for checkpoints; the least recently active are dropped",
    )

    def __post_init__(self) -> None:
        if self.cache_conversations <= 0:
            raise ConfigError(
                f"PARLEY_MATERIALIZER_CACHE_CONVERSATIONS must be positive, got {self.cache_conversations}"
            )
        if not 0 < self.checkpoint_min_s < self.checkpoint_max_s:
            raise ConfigError(
                "PARLEY_MATERIALIZER_CHECKPOINT_MIN_S must be positive and below PARLEY_MATERIALIZER_CHECKPOINT_MAX_S, "
                f"got {self.checkpoint_min_s} and {self.checkpoint_max_s}"
            )
        if self.live_replies <= 0:
            raise ConfigError(f"PARLEY_MATERIALIZER_LIVE_REPLIES must be positive, got {self.live_replies}")
        if not 0 <= self.fetch_wait_ms <= 1000:
            raise ConfigError(f"PARLEY_MATERIALIZER_FETCH_WAIT_MS must be between 0 and 1000, got {self.fetch_wait_ms}")

    @property
    def checkpoint_tick_s(self) -> float:
        """Timer period: text due ``min`` after a write is taken within half the slack to ``max``, the other half left for writing it."""
        return (self.checkpoint_max_s - self.checkpoint_min_s) / 2


@dataclass(frozen=True)
class TitlerSettings:
    """The titler's (streams/titles.py)."""

    engine_url: str = env(
        "PARLEY_TITLER_ENGINE_URL",
        "http://127.0.0.1:30000",
        "Engine (SGLang API) of the small pool that writes titles; empty = conversations keep the user's title or none",
    )
    max_tokens: int = env("PARLEY_TITLER_MAX_TOKENS", 16, "Most tokens of a title the engine may write")
    timeout_s: float = env("PARLEY_TITLER_TIMEOUT_S", 20.0, "Longest the engine may take to write one title")
    retry_s: float = env(
        "PARLEY_TITLER_RETRY_S", 30.0, "After the engine failed, titles are not asked for this long"
    )
    conversations: int = env(
        "PARLEY_TITLER_CONVERSATIONS", 50_000, "Conversations remembered while waiting for their first reply"
    )

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or self.timeout_s <= 0 or self.retry_s < 0 or self.conversations <= 0:
            raise ConfigError(
                "PARLEY_TITLER_MAX_TOKENS, PARLEY_TITLER_TIMEOUT_S and PARLEY_TITLER_CONVERSATIONS must be positive "
                "and PARLEY_TITLER_RETRY_S not negative"
            )


@dataclass(frozen=True)
class UsageSettings:
    """The usage processor's (streams/usage.py)."""

    retry_max_s: float = env(
        "PARLEY_USAGE_RETRY_MAX_S", 30.0, "Longest pause between retries of a failed Cassandra write of a usage row"
    )

    def __post_init__(self) -> None:
        if self.retry_max_s <= 0:
            raise ConfigError(f"PARLEY_USAGE_RETRY_MAX_S must be positive, got {self.retry_max_s}")

