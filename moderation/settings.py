"""Settings of moderation (``PARLEY_MODERATION_*``), read at start-up by whoever moderates (input and output)."""

from __future__ import annotations

from dataclasses import dataclass

from parley.settings import env


@dataclass(frozen=True)
class ModerationSettings:
    classifier: str = env(
        "PARLEY_MODERATION_CLASSIFIER",
        "local",
        "Which classifier scores texts: local (in process, no download) or llama-guard (Llama Guard 3 on SGLang)",
    )
    engine_url: str = env(
        "PARLEY_MODERATION_ENGINE_URL", "", "llama-guard: base URL of the SGLang engine serving the guard model"
    )
    guard_model: str = env(
        "PARLEY_MODERATION_GUARD_MODEL", "meta-llama/Llama-Guard-3-1B", "llama-guard: the model name recorded on results"
    )
    window_tokens: int = env(
        "PARLEY_MODERATION_WINDOW_TOKENS", 200, "A streamed reply is checked every this many tokens (and at its end)"
    )
    overlap_tokens: int = env(
        "PARLEY_MODERATION_OVERLAP_TOKENS",
        50,
        "Tokens before each window it also includes, so text split across windows is seen whole "
        "(NeMo Guardrails' streaming output rails do the same)",
    )
    policy: str = env(
        "PARLEY_MODERATION_POLICY",
        "",
        'Per-tier policy as JSON, e.g. {"free": {"mode": "strict", "thresholds": {"sexual": 0.3}}}; '
        "empty: every category blocks at 0.5, input checked in parallel (moderation/policy.py)",
    )
    timeout_s: float = env(
        "PARLEY_MODERATION_TIMEOUT_S", 5.0, "Longest one classification may take (llama-guard: one request to the engine)"
    )
    give_up_s: float = env(
        "PARLEY_MODERATION_GIVE_UP_S",
        20.0,
        "How long a check whose classifier gives no verdict (down, timed out, not a verdict) is tried again before "
        "it fails closed: the turn is stopped as if flagged",
    )
    org_refresh_s: float = env(
        "PARLEY_MODERATION_ORG_REFRESH_S", 10.0, "How often organisations' own policies are read again: a change applies within it"
    )
    nice: int = env(
        "PARLEY_MODERATION_NICE",
        5,
        "Scheduling niceness of the moderation processor: on a shared CPU the turn's own path goes first (0: as others)",
    )
    fetch_wait_ms: int = env(
        "PARLEY_MODERATION_FETCH_WAIT_MS",
        100,
        "How long a fetch may wait to fill (64 KiB) before moderation gets it: fewer, larger batches of token"
        " chunks for less CPU per token; a verdict comes up to this much later (checks run beside the turn)",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.fetch_wait_ms <= 1000:
            raise ValueError(f"PARLEY_MODERATION_FETCH_WAIT_MS must be between 0 and 1000, got {self.fetch_wait_ms}")
        if self.window_tokens < 1 or not 0 <= self.overlap_tokens < self.window_tokens:
            raise ValueError(
                "PARLEY_MODERATION_WINDOW_TOKENS must be at least 1 and PARLEY_MODERATION_OVERLAP_TOKENS in "
                f"[0, window): got {self.window_tokens} and {self.overlap_tokens}"
            )
