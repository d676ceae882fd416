"""What each tier blocks, at which scores, and when input is checked: ``PARLEY_MODERATION_POLICY`` read once.

The policy is JSON keyed by tier::

    {"free": {"block": ["sexual", "violence/graphic"], "thresholds": {"sexual": 0.3},
              "mode": "strict", "retain_flagged": false},
     "enterprise": {"thresholds": {"violence": 0.8}}}

A tier left out, or a key left out of a tier, keeps the default: every
category blocks at 0.5, input is checked beside generation, and a cut reply's
text is dropped. A tier Parley does not know gets the "free" policy. Anything
unknown in the JSON (a key, a category, a mode) is an error that names it: a
typo must not quietly turn moderation off.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from moderation.categories import CATEGORIES
from moderation.classifier import Scores

log = logging.getLogger(__name__)

TIERS = ("free", "plus", "enterprise")
MODES = ("parallel", "strict")  # parallel: input checked beside generation; strict: before it starts


@dataclass(frozen=True)
class TierPolicy:
    block: frozenset[str] = frozenset(CATEGORIES)  # categories that cut a reply or stop a turn
    thresholds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # per category
    default_threshold: float = 0.5  # for categories without their own threshold
    mode: str = "parallel"
    retain_flagged: bool = False  # keep the original text of a cut reply for review, or drop it

    def flags(self, scores: Scores) -> tuple[str, ...]:
        """The blocking categories ``scores`` reach, in CATEGORIES order."""
        return tuple(c for c in scores.over(self.thresholds, self.default_threshold) if c in self.block)


@dataclass(frozen=True)
class Policy:
    tiers: Mapping[str, TierPolicy]

    def for_tier(self, tier: str) -> TierPolicy:
        """The tier's policy ("free"'s for an unknown tier)."""
        return self.tiers.get(tier, self.tiers["free"])


#: What an organisation's admin may set (PATCH /v1/org): more categories that block, lower scores. The mode
#: (strict needs the context builder) and retaining flagged text stay the operator's, per tier.
ORG_KEYS = ("block", "thresholds", "default_threshold")


@dataclass(frozen=True)
class OrgPolicy:
    """What a team organisation adds to its tier's policy. It only tightens: its categories block besides the
    tier's, and each category blocks at the lower of the two thresholds. A looser value has no effect, so the
    operator's floor holds whatever an admin sets, and whatever the operator changes later."""

    block: frozenset[str] = frozenset()
    thresholds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default_threshold: float | None = None  # None: the tier's

    def over(self, tier: TierPolicy) -> TierPolicy:
        def threshold(category: str) -> float:
            ours = self.thresholds.get(category, self.default_threshold)
            theirs = tier.thresholds.get(category, tier.default_threshold)
            return theirs if ours is None else min(ours, theirs)

        default = tier.default_threshold if self.default_threshold is None else min(self.default_threshold, tier.default_threshold)
        return replace(
            tier,
            block=tier.block | self.block,
            thresholds=MappingProxyType({c: threshold(c) for c in CATEGORIES}),
            default_threshold=default,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"block": sorted(self.block), "thresholds": dict(self.thresholds)}
        if self.default_threshold is not None:
            out["default_threshold"] = self.default_threshold
        return out


def org_policy_from(raw: Any) -> OrgPolicy:
    """An organisation's policy from its JSON object; ValueError names what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("moderation_policy must be a JSON object (or null for the tier's)")
    _known("key of moderation_policy", raw, ORG_KEYS)
    # Left out means "add nothing", never "the default": an absent block must not read as every category.
    parsed = _tier("org", {"block": [], **raw}, where="moderation_policy")
    return OrgPolicy(parsed.block, parsed.thresholds, parsed.default_threshold if "default_threshold" in raw else None)


def policy_from(text: str) -> Policy:
    """The policy ``PARLEY_MODERATION_POLICY`` holds ("" → the defaults for every tier); ValueError names what is wrong."""
    try:
        raw: Any = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"PARLEY_MODERATION_POLICY is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError("PARLEY_MODERATION_POLICY must be a JSON object keyed by tier")
    _known("tier", raw, TIERS)
    return Policy(MappingProxyType({tier: _tier(tier, raw.get(tier, {})) for tier in TIERS}))


def _tier(tier: str, raw: Any, where: str | None = None) -> TierPolicy:
    where = where or f"PARLEY_MODERATION_POLICY[{tier!r}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a JSON object")
    _known(f"key of {where}", raw, ("block", "thresholds", "default_threshold", "mode", "retain_flagged"))
    default = TierPolicy()
    block = raw.get("block", sorted(default.block))
    thresholds = raw.get("thresholds", {})
    if not isinstance(block, list) or not isinstance(thresholds, dict):
        raise ValueError(f"{where}: block is a list of categories, thresholds an object of category → score")
    _known(f"category in {where}.block", block, CATEGORIES)
    _known(f"category in {where}.thresholds", thresholds, CATEGORIES)
    default_threshold = raw.get("default_threshold", default.default_threshold)
    for name, value in (*thresholds.items(), ("default_threshold", default_threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{where}: threshold of {name} must be a number in [0, 1], not {value!r}")
    mode = raw.get("mode", default.mode)
    if mode not in MODES:
        raise ValueError(f"{where}: unknown mode {mode!r} (use {' or '.join(MODES)})")
    retain = raw.get("retain_flagged", default.retain_flagged)
    if not isinstance(retain, bool):
        raise ValueError(f"{where}: retain_flagged must be true or false")
    return TierPolicy(
        block=frozenset(block),
        thresholds=MappingProxyType({c: float(v) for c, v in thresholds.items()}),
        default_threshold=float(default_threshold),
        mode=mode,
        retain_flagged=retain,
    )


def _known(what: str, names: Any, known: tuple[str, ...]) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what}: {', '.join(map(repr, unknown))} (known: {', '.join(known)})")


def org_policies_from(rows: Mapping[str, str]) -> dict[str, OrgPolicy]:
    """``org_policies`` rows (org → JSON) as policies; a row that no longer parses (a category since
    renamed) is left out, so its organisation gets its tier's policy, and named in the error log."""
    out = {}
    for org, text in rows.items():
        try:
            out[org] = org_policy_from(json.loads(text))
        except ValueError as exc:
            log.error("an organisation's moderation policy does not parse; its tier's applies", extra={"org_id": org, "error": str(exc)})
    return out
