"""`parley report --experiment NAME`: the arms of one experiment compared, with 95% intervals (pure).

Every turn of a replay file carries the experiment and arm its GenerationRequested was stamped with
(``turns.Turn.experiment``, ``arm``). Each arm is compared with the baseline arm (``control`` when there is
one, else the first by name, else ``--baseline``) on TTFT (mean and median), completion tokens and cost per
1,000 turns, the thumbs up share of rated turns and the regenerate rate.

Users, not turns, are what was randomised (assignment is by user), and one user's turns are not independent
(they run at the same moments, on the same conversation, by the same person). So every interval treats the
user as the unit: a mean over turns is a ratio of per-user sums, its variance the delta method's
(``clustered_mean``: the standard error of an A/B metric whose analysis unit is finer than its randomisation
unit), the difference's interval Welch's with Satterthwaite's degrees of freedom over users; a share is the
mean of a 0/1 value, the same way; the median difference is a percentile bootstrap that resamples users with
their turns (2,000 resamples, a fixed seed: the same file always gives the same interval). Treating turns as
independent gave a false difference between two identical arms in ``bench.experiment`` (−17 ms, interval
[−34, −1] ms, over 60 turns of 30 users); by user it covers zero.

A difference whose interval covers zero is reported as "no detectable difference".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from tools.analysts.report import Price, regenerated_turns, turn_cost

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 38  # fixed, so the same file always gives the same interval


@dataclass(frozen=True)
class Interval:
    estimate: float  # arm − baseline
    low: float
    high: float

    @property
    def covers_zero(self) -> bool:
        return self.low <= 0 <= self.high


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the Cornish–Fisher expansion around the normal one (within 1e-3 for df ≥ 5,
    exact as df grows; below 5 degrees of freedom an interval says little anyway)."""
    z = NormalDist().inv_cdf(p)
    if not math.isfinite(df) or df <= 0:
        return z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


Groups = list[list[float]]  # per user, the values of their turns


def clustered_mean(groups: Groups) -> tuple[float, float, int] | None:
    """The mean over every turn, its variance by the delta method over users, and the users counted; None
    without a value. With one turn per user this is the plain mean and its variance s²/n."""
    groups = [g for g in groups if g]
    n = len(groups)
    if n == 0:
        return None
    sums, counts = [sum(g) for g in groups], [len(g) for g in groups]
    total = sum(counts)
    mean = sum(sums) / total
    if n < 2:
        return mean, math.nan, n
    residuals = [s - mean * c for s, c in zip(sums, counts)]
    return mean, n / (n - 1) * sum(r * r for r in residuals) / total**2, n


def welch(a: Groups, b: Groups, confidence: float = CONFIDENCE) -> Interval | None:
    """mean(a) − mean(b) over turns, Welch's interval with users as the unit; None under two users a side."""
    ma, mb = clustered_mean(a), clustered_mean(b)
    if ma is None or mb is None or ma[2] < 2 or mb[2] < 2:
        return None
    (xa, va, na), (xb, vb, nb) = ma, mb
    diff, se = xa - xb, math.sqrt(va + vb)
    if se == 0:
        return Interval(diff, diff, diff)
    df = (va + vb) ** 2 / ((va**2 / (na - 1)) + (vb**2 / (nb - 1)))
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return Interval(diff, diff - half, diff + half)


def bootstrap_median(a: Groups, b: Groups, confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> Interval | None:  # fmt: skip
    """median(a) − median(b) over turns, percentile bootstrap resampling each side's users (with all their
    turns) on its own; None when a side has no value."""
    a, b = [g for g in a if g], [g for g in b if g]
    if not a or not b:
        return None
    rng = np.random.default_rng(seed)
    diffs = np.array([_resampled_median(a, rng) - _resampled_median(b, rng) for _ in range(resamples)])
    tail = (1 - confidence) / 2 * 100
    whole = float(np.median(np.concatenate([np.asarray(g) for g in a])) - np.median(np.concatenate([np.asarray(g) for g in b])))
    return Interval(whole, float(np.percentile(diffs, tail)), float(np.percentile(diffs, 100 - tail)))


def _resampled_median(groups: Groups, rng: np.random.Generator) -> float:
    picked = rng.integers(0, len(groups), size=len(groups))
    return float(np.median(np.concatenate([np.asarray(groups[i], dtype=float) for i in picked])))


@dataclass(frozen=True)
class ArmValue:
    n: int  # the turns (or rated turns) the value is over
    value: float | None  # None: no such turn


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    arms: dict[str, ArmValue]
    differences: dict[str, Interval | None]  # arm (not the baseline) → arm − baseline; None: too few turns


@dataclass
class ExperimentReport:
    experiment: str
    baseline: str
    arms: dict[str, int]  # arm → turns
    users: dict[str, int]  # arm → distinct users
    metrics: list[Metric] = field(default_factory=list)
    confidence: float = CONFIDENCE

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def compare(records: list[dict[str, Any]], experiment: str, prices: dict[str, Price], baseline: str | None = None) -> ExperimentReport:
    """The arms of ``experiment`` among ``records`` (replay turn records), each against the baseline arm."""
    regenerated = regenerated_turns(records)
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for t in records:
        if t.get("experiment") == experiment and t.get("arm"):
            by_arm.setdefault(t["arm"], []).append(t)
    if not by_arm:
        raise ValueError(f"no turn of experiment {experiment!r} in the file (was it running in the replayed window?)")
    if baseline is None:
        baseline = "control" if "control" in by_arm else sorted(by_arm)[0]
    elif baseline not in by_arm:
        raise ValueError(f"arm {baseline!r} has no turns; arms: {', '.join(sorted(by_arm))}")
    arms = [baseline, *sorted(a for a in by_arm if a != baseline)]

    def per_user(arm: str, pick: Any) -> Groups:
        """Each user's values of ``pick`` (None: the turn does not count), users in a fixed order."""
        by_user: dict[str, list[float]] = {}
        for t in by_arm[arm]:
            value = pick(t)
            if value is not None:
                by_user.setdefault(t["user_id"], []).append(float(value))
        return [by_user[u] for u in sorted(by_user)]

    metrics: list[Metric] = []
    others = arms[1:]
    measures = (
        ("TTFT, mean", "ms", lambda t: t.get("ttft_ms")),
        ("completion tokens per turn", "tokens", lambda t: t["completion_tokens"] if t.get("cache") is not None else None),
        ("cost per 1,000 turns", "USD", lambda t: turn_cost(t, prices) * 1000),
        ("thumbs up share of rated turns", "share", lambda t: {"up": 1, "down": 0}.get(t.get("feedback") or "")),
        ("regenerate rate", "share", lambda t: int(t["request_id"] in regenerated)),
    )
    for name, unit, pick in measures:
        data = {a: per_user(a, pick) for a in arms}
        means = {a: clustered_mean(data[a]) for a in arms}
        metrics.append(Metric(
            name, unit, {a: ArmValue(sum(map(len, data[a])), means[a][0] if means[a] else None) for a in arms},
            {a: welch(data[a], data[baseline]) for a in others},
        ))  # fmt: skip
        if name == "TTFT, mean":
            metrics.append(Metric(
                "TTFT, median", "ms",
                {a: ArmValue(sum(map(len, data[a])), _median([v for g in data[a] for v in g])) for a in arms},
                {a: bootstrap_median(data[a], data[baseline]) for a in others},
            ))  # fmt: skip
    return ExperimentReport(
        experiment=experiment,
        baseline=baseline,
        arms={a: len(by_arm[a]) for a in arms},
        users={a: len({t["user_id"] for t in by_arm[a]}) for a in arms},
        metrics=metrics,
    )


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "share":
        return f"{value * 100:.1f}%"
    if unit == "USD":
        return f"{value:.4f}"
    return f"{value:.1f}"


def verdict(interval: Interval | None) -> str:
    if interval is None:
        return "too few turns"
    if interval.covers_zero:
        return "no detectable difference"
    return "higher" if interval.estimate > 0 else "lower"


def markdown(r: ExperimentReport) -> str:
    pct = f"{r.confidence * 100:g}%"
    lines = [
        f"# Experiment {r.experiment}",
        "",
        "Arms: " + ", ".join(f"{a} {n} turns of {r.users[a]} users" for a, n in r.arms.items()) + f"; baseline {r.baseline}.",
        "",
        f"| metric | arm | n | value | difference vs {r.baseline} | {pct} interval | verdict |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for m in r.metrics:
        for arm, v in m.arms.items():
            d = m.differences.get(arm)
            if arm == r.baseline:
                diff, ci, word = "", "", "baseline"
            elif d is None:
                diff, ci, word = "–", "–", verdict(d)
            else:
                diff, ci, word = _num(d.estimate, m.unit), f"[{_num(d.low, m.unit)}, {_num(d.high, m.unit)}]", verdict(d)
            lines.append(f"| {m.name} ({m.unit}) | {arm} | {v.n} | {_num(v.value, m.unit)} | {diff} | {ci} | {word} |")
    lines += [
        "",
        f"Differences are arm − {r.baseline}. Means: Welch's interval; medians: a percentile bootstrap "
        f"({BOOTSTRAP_RESAMPLES} resamples of users, fixed seed); shares are means of a 0/1 value. Users are the "
        "unit of every interval (they were randomised; their turns are not independent). \"No detectable "
        "difference\": the interval covers zero. TTFT and tokens are over turns that reached an engine; the thumbs "
        "up share over rated turns; cost and the regenerate rate over every turn. n counts turns.",
    ]
    return "\n".join(lines) + "\n"
