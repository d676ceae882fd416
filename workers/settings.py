"""Settings of one inference worker (``PARLEY_WORKER_*``), read at start-up.

Kafka settings come from ``parley.settings.KafkaSettings``; these are the
worker's own: which pool it serves, which engine it drives and how hard.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace

from parley.errors import ConfigError
from parley.settings import env
from schemas.catalog import POOLS
from workers.chat_template import FAMILIES, ChatTemplate, template


@dataclass(frozen=True)
class WorkerSettings:
    pool: str = env("PARLEY_WORKER_POOL", "small", f"Pool this worker serves: {' | '.join(POOLS)}")
    engine_urls: str = env(
        "PARLEY_WORKER_ENGINE_URLS",
        "http://127.0.0.1:30000",
        "Base URLs of the engines (SGLang API) this worker fronts, comma-separated: each engine is its own"
        " consumer-group member with its own heartbeat, so the router places conversations per engine replica",
    )
    max_concurrency: int = env(
        "PARLEY_WORKER_MAX_CONCURRENCY",
        32,
        "Generations running in the engine at once; the worker stops taking records beyond it",
    )
    max_queued: int = env(
        "PARLEY_WORKER_MAX_QUEUED", 4, "Records accepted on top of the running ones, started as slots free up"
    )
    # Latency against cost, per token (workers/coalesce.py): every TokenChunk is a record that Kafka
    # stores and every gateway and the materializer decode. The first text goes out at once whatever these say.
    coalesce_ms: float = env(
        "PARLEY_WORKER_COALESCE_MS",
        80.0,
        "After a stream's first TokenChunk, longest a generated delta waits for others to share its chunk"
        " (a reader sees text every this many ms; a stream slower than one token per window is never held)",
    )
    coalesce_tokens: int = env(
        "PARLEY_WORKER_COALESCE_TOKENS", 32, "Tokens that make a TokenChunk go out at once (bounds chunks of fast streams)"
    )
    linger_ms: float = env(
        "PARLEY_WORKER_LINGER_MS",
        5.0,
        "How long the producer of token chunks waits to batch records of many streams into one request"
        " (librdkafka linger.ms: added to every chunk's latency, saves the broker a request per record)",
    )
    worker_id: str = env("PARLEY_WORKER_ID", "", "Stable worker id (heartbeats, replica); empty: <hostname>-<pid>")
    heartbeat_s: float = env("PARLEY_WORKER_HEARTBEAT_S", 2.0, "Seconds between WorkerHeartbeat events")
    model_name: str = env(
        "PARLEY_WORKER_MODEL", "", "Model name to report when the engine does not say (model_info fails)"
    )
    temperature: float = env("PARLEY_WORKER_TEMPERATURE", 0.7, "Sampling temperature sent to the engine")
    drain_timeout_s: float = env(
        "PARLEY_WORKER_DRAIN_TIMEOUT_S",
        30.0,
        "On SIGTERM, how long running generations may finish before they are abandoned",
    )
    abort_grace_s: float = env(
        "PARLEY_WORKER_ABORT_GRACE_S",
        5.0,
        "After a cancel, how long the engine may take to end the stream before the worker stops reading it",
    )
    session_timeout_ms: int = env(
        "PARLEY_WORKER_SESSION_TIMEOUT_MS",
        10_000,
        "Consumer-group session timeout: how long a worker that died without leaving keeps its partitions,"
        " stalling their replies (librdkafka's 45 s is too long for chat; the broker allows 6000 at the least)",
    )
    transaction_timeout_ms: int = env(
        "PARLEY_WORKER_TRANSACTION_TIMEOUT_MS",
        10_000,
        "Kafka transaction timeout of the closing events (workers/transactions.py): how long a transaction"
        " its worker died inside holds back readers of its chat.events partition before the broker aborts it",
    )
    cancel_memory_s: float = env(
        "PARLEY_WORKER_CANCEL_MEMORY_S", 60.0, "How long a cancel is remembered for a request that has not arrived yet"
    )

    def __post_init__(self) -> None:
        urls = self.engine_url_list
        if not urls:
            raise ConfigError("PARLEY_WORKER_ENGINE_URLS names no engine")
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ConfigError(f"PARLEY_WORKER_ENGINE_URLS: {bad[0]!r} is not an http(s) URL")
        if len(set(urls)) != len(urls):
            raise ConfigError("PARLEY_WORKER_ENGINE_URLS names an engine twice")
        if self.pool not in POOLS:
            raise ConfigError(f"PARLEY_WORKER_POOL={self.pool!r} is not a pool; pools are {', '.join(POOLS)}")
        if self.max_concurrency < 1:
            raise ConfigError(f"PARLEY_WORKER_MAX_CONCURRENCY must be at least 1, got {self.max_concurrency}")
        if self.max_queued < 0:
            raise ConfigError(f"PARLEY_WORKER_MAX_QUEUED must not be negative, got {self.max_queued}")
        if self.coalesce_ms < 0 or self.coalesce_tokens < 1:
            raise ConfigError("PARLEY_WORKER_COALESCE_MS must be >= 0 and PARLEY_WORKER_COALESCE_TOKENS >= 1")
        if not 0 <= self.linger_ms <= 1000:
            raise ConfigError(f"PARLEY_WORKER_LINGER_MS must be between 0 and 1000, got {self.linger_ms}")
        if self.session_timeout_ms < 1000:
            raise ConfigError(f"PARLEY_WORKER_SESSION_TIMEOUT_MS must be at least 1000, got {self.session_timeout_ms}")
        if self.transaction_timeout_ms < 1000:
            raise ConfigError(
                f"PARLEY_WORKER_TRANSACTION_TIMEOUT_MS must be at least 1000, got {self.transaction_timeout_ms}"
            )
        if self.heartbeat_s <= 0:
            raise ConfigError(f"PARLEY_WORKER_HEARTBEAT_S must be positive, got {self.heartbeat_s}")
        if not self.worker_id:
            # Resolved here, at start-up, not at import: the pid is the running process's.
            object.__setattr__(self, "worker_id", f"{socket.gethostname()}-{os.getpid()}")

    @property
    def engine_url_list(self) -> list[str]:
        return [u.strip().rstrip("/") for u in self.engine_urls.split(",") if u.strip()]

    @property
    def engine_url(self) -> str:
        """The one engine of a replica's settings (``replicas``)."""
        urls = self.engine_url_list
        if len(urls) != 1:
            raise ValueError("settings of several engines: take engine_url of each of replicas()")
        return urls[0]

    def replicas(self) -> list[WorkerSettings]:
        """One settings per engine, with ids ``<worker_id>.<n>`` when there are several.

        Each runs as its own member of the pool's consumer group (own partitions,
        heartbeat and transactional id), so the router's placement, admission and
        the KV-cache affinity it keeps are per engine replica, whichever process
        fronts it: one worker per engine, or one for several.
        """
        urls = self.engine_url_list
        if len(urls) == 1:
            return [self]
        return [replace(self, engine_urls=url, worker_id=f"{self.worker_id}.{n}") for n, url in enumerate(urls)]

    @property
    def group(self) -> str:
        """The consumer group every worker of this pool joins."""
        return f"workers.{self.pool}"

    @property
    def capacity(self) -> int:
        """Records held at once (running + queued): the bound on what is taken from Kafka."""
        return self.max_concurrency + self.max_queued


@dataclass(frozen=True)
class TemplateSettings:
    """Each pool's chat template family (workers/chat_template.py), read by whatever renders a prompt for a
    pool's engine: its workers; the titler and the summariser (the small pool's); the context builder, which
    counts in the default pool's."""

    pools: str = env(
        "PARLEY_POOL_TEMPLATES",
        "small=chatml,medium=chatml,frontier=chatml",
        f"Chat template family of each pool's model, pool=family[,…] for every pool ({' | '.join(FAMILIES)});"
        " the default is the local stack's SmolLM2 (ChatML); the fleet spec's pools name theirs",
    )

    def __post_init__(self) -> None:
        self.families()

    def families(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in self.pools.split(","))):
            pool, _, family = (part.strip() for part in item.partition("="))
            if pool not in POOLS:
                raise ConfigError(f"PARLEY_POOL_TEMPLATES: {item!r} is not pool=family with a pool of {', '.join(POOLS)}")
            if family not in FAMILIES:
                raise ConfigError(f"PARLEY_POOL_TEMPLATES: {pool}={family!r} is not one of {', '.join(FAMILIES)}")
            out[pool] = family
        return out

    def of(self, pool: str) -> ChatTemplate:
        """``pool``'s template; a pool the setting leaves out is refused, never rendered in another model's."""
        family = self.families().get(pool)
        if family is None:
            raise ConfigError(f"PARLEY_POOL_TEMPLATES names no template for the pool {pool!r}: add {pool}=<family>")
        return template(family)
