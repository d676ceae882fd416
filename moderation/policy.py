"""What each tier's moderation blocks, and how (``PARLEY_MODERATION_POLICY``).

Per tier: the categories that stop a turn, their thresholds, whether the input
is checked beside the generation (``parallel``, the default: it never adds to
TTFT) or before it (``strict``: the context builder waits for the verdict), and
whether a flagged text is kept for review. Policies per organisation come with
organisations (issue 19); ``for_tier`` takes the org already so callers need
not change then.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from moderation.categories import CATEGORIES, check
from moderation.classifier import Scores

TIERS = ("free", "plus", "enterprise")
MODES = ("parallel", "strict")
_KEYS = frozenset({"block", "thresholds", "default_threshold", "mode", "retain_flagged"})


@dataclass(frozen=True)
class TierPolicy:
    block: frozenset[str] = frozenset(CATEGORIES)
    thresholds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default_threshold: float = 0.5
    mode: str = "parallel"
    retain_flagged: bool = False

    def flags(self, scores: Scores) -> tuple[str, ...]:
        """The categories this policy blocks that reached their threshold, in CATEGORIES order."""
        return tuple(c for c in scores.over(self.thresholds, self.default_threshold) if c in self.block)


@dataclass(frozen=True)
class Policy:
    tiers: Mapping[str, TierPolicy]

    def for_tier(self, tier: str, org: str | None = None) -> TierPolicy:
        """The tier's policy (an unknown tier gets the free tier's); ``org`` is unused until organisations exist."""
        return self.tiers.get(tier) or self.tiers["free"]


def policy_from(text: str) -> Policy:
    """The policy a JSON text describes (``""``: the defaults); ValueError naming what is wrong."""
    tiers = {t: TierPolicy() for t in TIERS}
    if not text.strip():
        return Policy(MappingProxyType(tiers))
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"PARLEY_MODERATION_POLICY is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("PARLEY_MODERATION_POLICY must be an object of tiers")
    for tier, spec in raw.items():
        if tier not in TIERS:
            raise ValueError(f"PARLEY_MODERATION_POLICY: unknown tier {tier!r}; tiers are {', '.join(TIERS)}")
        tiers[tier] = _tier(tier, spec)
    return Policy(MappingProxyType(tiers))


def _tier(tier: str, spec: Any) -> TierPolicy:
    where = f"PARLEY_MODERATION_POLICY[{tier}]"
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be an object")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; keys are {', '.join(sorted(_KEYS))}")
    block = frozenset(check(c) for c in spec.get("block", CATEGORIES))
    thresholds = {check(c): _unit(f"{where}.thresholds.{c}", v) for c, v in (spec.get("thresholds") or {}).items()}
    mode = spec.get("mode", "parallel")
    if mode not in MODES:
        raise ValueError(f"{where}.mode must be one of {', '.join(MODES)}, got {mode!r}")
    retain = spec.get("retain_flagged", False)
    if not isinstance(retain, bool):
        raise ValueError(f"{where}.retain_flagged must be true or false")
    return TierPolicy(
        block=block,
        thresholds=MappingProxyType(thresholds),
        default_threshold=_unit(f"{where}.default_threshold", spec.get("default_threshold", 0.5)),
        mode=mode,
        retain_flagged=retain,
    )


def _unit(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{where} must be a number in (0, 1], got {value!r}")
    return float(value)
