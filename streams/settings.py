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

    def group(self, processor: str) -> str:
        return f"{self.group_prefix}streams.{processor}"


@dataclass(frozen=True)
class ContextSettings:
    system_prompt: str = env(
        "PARLEY_CONTEXT_SYSTEM_PROMPT", "You are a helpful assistant.", "System prompt put first in every prompt"
    )
    budget_tokens: int = env(
        "PARLEY_CONTEXT_BUDGET_TOKENS", 3072, "Token budget of a prompt (system prompt included); older turns are left out"
    )
    max_tokens: int = env(
        "PARLEY_CONTEXT_MAX_TOKENS", 512, "Cap on generated tokens when the request names none"
    )
    cache_conversations: int = env(
        "PARLEY_CONTEXT_CACHE_CONVERSATIONS", 10_000, "Conversations kept in memory; others are reloaded from Cassandra"
    )
    parent_wait_s: float = env(
        "PARLEY_CONTEXT_PARENT_WAIT_S",
        15.0,
        "On a conversation reloaded from Cassandra, how long to wait for the materializer to write the message being answered",
    )

    def __post_init__(self) -> None:
        if self.budget_tokens <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_BUDGET_TOKENS must be positive, got {self.budget_tokens}")
        if self.max_tokens <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_MAX_TOKENS must be positive, got {self.max_tokens}")
        if self.cache_conversations <= 0:
            raise ConfigError(f"PARLEY_CONTEXT_CACHE_CONVERSATIONS must be positive, got {self.cache_conversations}")


@dataclass(frozen=True)
class RouterSettings:
    pools: str = env(
        "PARLEY_ROUTER_POOLS",
        "small=Qwen/Qwen2.5-0.5B-Instruct",
        "Pools the router may use and the model each serves: pool=model[,pool=model…]",
    )
    default_pool: str = env("PARLEY_ROUTER_DEFAULT_POOL", "small", "Pool of a turn no rule places elsewhere")

    def pool_models(self) -> dict[str, str]:
        """``pools`` parsed and checked against the topic catalog."""
        out: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in self.pools.split(","))):
            pool, sep, model = item.partition("=")
            pool, model = pool.strip(), model.strip()
            if not sep or not model:
                raise ConfigError(f"PARLEY_ROUTER_POOLS: {item!r} is not pool=model")
            if pool not in POOLS:
                raise ConfigError(f"PARLEY_ROUTER_POOLS: unknown pool {pool!r}; the catalog has {POOLS}")
            out[pool] = model
        if self.default_pool not in out:
            raise ConfigError(
                f"PARLEY_ROUTER_DEFAULT_POOL={self.default_pool!r} is not among PARLEY_ROUTER_POOLS ({sorted(out)})"
            )
        return out


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

    @property
    def checkpoint_tick_s(self) -> float:
        """Timer period: text due ``min`` after a write is taken within half the slack to ``max``, the other half left for writing it."""
        return (self.checkpoint_max_s - self.checkpoint_min_s) / 2
