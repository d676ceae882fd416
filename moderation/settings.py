"""Settings of moderation (``PARLEY_MODERATION_*``): the processor, the strict context builder and
``POST /v1/moderations`` read the same, so one policy means the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass

from parley.settings import env


@dataclass(frozen=True)
class ModerationSettings:
    classifier: str = env("PARLEY_MODERATION_CLASSIFIER", "local", "local (bundled, no download) | llama-guard")
    engine_url: str = env("PARLEY_MODERATION_ENGINE_URL", "", "llama-guard: the SGLang engine that serves it")
    guard_model: str = env("PARLEY_MODERATION_GUARD_MODEL", "meta-llama/Llama-Guard-3-1B", "llama-guard: the model name")
    timeout_s: float = env("PARLEY_MODERATION_TIMEOUT_S", 5.0, "Longest one llama-guard call may take")
    window_tokens: int = env(
        "PARLEY_MODERATION_WINDOW_TOKENS", 200, "A streaming reply is checked every this many tokens (NeMo Guardrails' chunk size)"
    )
    overlap_tokens: int = env(
        "PARLEY_MODERATION_OVERLAP_TOKENS", 50, "Each window's check also reads this many tokens before it (a sentence cut by a window edge)"
    )
    policy: str = env(
        "PARLEY_MODERATION_POLICY",
        "",
        'Per tier, JSON: {"free": {"block": [...], "thresholds": {...}, "mode": "parallel|strict", "retain_flagged": false}}; '
        "empty: every category blocks at 0.5, checked beside the generation",
    )
