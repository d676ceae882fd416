"""Controlled experiments: declaring one, the running set, and which arm a user is in (pure).

An operator declares an experiment on ``ops.experiments`` (``ExperimentStarted``: arms with shares and
router overrides, the tiers that take part) and stops it there (``ExperimentStopped``). The gateway folds
that topic into the running set (``Running``) and stamps each turn of a taking-part tier with the user's
arm (``Running.assignment``): an ``Assignment`` on the GenerationRequested, copied by the context builder
onto the InferenceRequested, where the router applies its overrides (``streams.router.choose_pool``).

Assignment is a pure function of (experiment name, user id): the same user is in the same arm on every
gateway, turn and restart, and two experiments split users independently of each other.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from parley.errors import ConfigError
from schemas.catalog import POOLS
from schemas.events import ArmOverrides, Assignment, Event, ExperimentArm, ExperimentStarted, ExperimentStopped

#: What an arm may change, by name; anything else is refused when the experiment is declared.
OVERRIDES: tuple[str, ...] = tuple(f.name for f in fields(ArmOverrides))
TIERS = frozenset({"free", "plus", "enterprise"})
#: Shares must add up to 1 within this (they are typed as decimals by an operator).
SHARE_SLACK = 1e-6
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def unit(experiment: str, user_id: str) -> float:
    """A point in [0, 1) for (experiment, user): the first 8 bytes of SHA-256, stable across processes."""
    digest = hashlib.sha256(f"{experiment}\x00{user_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign(experiment: ExperimentStarted, user_id: str) -> ExperimentArm:
    """The user's arm: ``unit`` laid on the arms' shares in declared order."""
    point, edge = unit(experiment.experiment, user_id), 0.0
    for arm in experiment.arms:
        edge += arm.share
        if point < edge:
            return arm
    return experiment.arms[-1]  # the shares' rounding left a sliver above the last edge


def overrides(pairs: Mapping[str, str]) -> ArmOverrides:
    """An arm's overrides from ``name=value`` pairs; an unknown name, pool or a bad number is refused by name."""
    unknown = sorted(set(pairs) - set(OVERRIDES))
    if unknown:
        raise ConfigError(f"unknown override {', '.join(map(repr, unknown))}; an arm may set: {', '.join(OVERRIDES)}")
    pool = pairs.get("pool", "")
    if pool and pool not in POOLS:
        raise ConfigError(f"override pool={pool!r}: pools are {', '.join(POOLS)}")
    scores: dict[str, float | None] = {}
    for name in ("medium_score", "frontier_score"):
        text = pairs.get(name)
        try:
            scores[name] = None if text is None else float(text)
        except ValueError:
            raise ConfigError(f"override {name}={text!r}: not a number") from None
        if scores[name] is not None and not math.isfinite(scores[name]):  # type: ignore[arg-type]
            raise ConfigError(f"override {name}={text!r}: not a finite number")
    return ArmOverrides(pool=pool, medium_score=scores["medium_score"], frontier_score=scores["frontier_score"])


def parse_arm(text: str) -> ExperimentArm:
    """``NAME:SHARE[:key=value,key=value]``, e.g. ``slow:0.5:pool=medium`` (the CLI's ``--arm``)."""
    name, _, rest = text.partition(":")
    share_text, _, pairs_text = rest.partition(":")
    try:
        share = float(share_text)
    except ValueError:
        raise ConfigError(f"--arm {text!r}: write NAME:SHARE[:key=value,...], e.g. treatment:0.5:pool=medium") from None
    pairs: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in pairs_text.split(","))):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--arm {text!r}: override {pair!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return ExperimentArm(name=name.strip(), share=share, overrides=overrides(pairs))


def validate(started: ExperimentStarted) -> None:
    """Refuse an experiment the gateway could not assign fairly, naming what is wrong."""
    name = started.experiment
    if not _NAME.fullmatch(name):
        raise ConfigError(f"experiment name {name!r}: 1–64 ASCII letters, digits, '-', '_' or '.'")
    if len(started.arms) < 2:
        raise ConfigError(f"experiment {name!r}: give at least two arms (--arm NAME:SHARE[:overrides])")
    names = [a.name for a in started.arms]
    if len(set(names)) != len(names) or not all(names):
        raise ConfigError(f"experiment {name!r}: arm names must be non-empty and distinct, got {names}")
    for arm in started.arms:
        if not 0 < arm.share <= 1:
            raise ConfigError(f"arm {arm.name!r}: share {arm.share:g} is not in (0, 1]")
        o = arm.overrides
        if o.medium_score is not None and o.frontier_score is not None and o.medium_score > o.frontier_score:
            raise ConfigError(f"arm {arm.name!r}: medium_score {o.medium_score:g} is above frontier_score {o.frontier_score:g}")
    total = sum(a.share for a in started.arms)
    if abs(total - 1) > SHARE_SLACK:
        raise ConfigError(f"experiment {name!r}: the arms' shares add up to {total:g}, not 1")
    bad = sorted(set(started.tiers) - TIERS)
    if bad:
        raise ConfigError(f"experiment {name!r}: unknown tier {', '.join(bad)}; tiers are {', '.join(sorted(TIERS))}")


def covers(experiment: ExperimentStarted, tier: str) -> bool:
    return not experiment.tiers or tier in experiment.tiers


@dataclass
class Running:
    """The experiments running now: a fold of ``ops.experiments`` (a start replaces one of its name, a stop
    ends it). Replaying the topic twice gives the same set."""

    experiments: dict[str, ExperimentStarted] = field(default_factory=dict)

    def apply(self, event: Event) -> None:
        if isinstance(event, ExperimentStarted):
            self.experiments[event.experiment] = event
        elif isinstance(event, ExperimentStopped):
            self.experiments.pop(event.experiment, None)

    def apply_all(self, events: Iterable[Event]) -> Running:
        for event in events:
            self.apply(event)
        return self

    def for_tier(self, tier: str) -> list[ExperimentStarted]:
        """The running experiments a tier's turns take part in, oldest first (ties by name)."""
        return sorted((e for e in self.experiments.values() if covers(e, tier)), key=lambda e: (e.occurred_at, e.experiment))

    def overlapping(self, started: ExperimentStarted) -> list[str]:
        """Running experiments (other than its own name) that would share a tier with ``started``."""
        tiers = set(started.tiers) or TIERS
        return sorted(
            e.experiment
            for e in self.experiments.values()
            if e.experiment != started.experiment and tiers & (set(e.tiers) or TIERS)
        )

    def assignment(self, user_id: str, tier: str) -> Assignment | None:
        """The arm the user's turn is in: of the oldest running experiment its tier takes part in (a turn is in
        one experiment at most; `parley experiments start` refuses overlapping tiers, this settles a race)."""
        taking_part = self.for_tier(tier)
        if not taking_part:
            return None
        experiment = taking_part[0]
        arm = assign(experiment, user_id)
        return Assignment(experiment=experiment.experiment, arm=arm.name, overrides=arm.overrides)
