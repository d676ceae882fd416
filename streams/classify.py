"""Which pool a turn needs: a fast, explainable classifier over cheap features (pure).

The cheapest pool that clears the bar serves the turn; the bar is a difficulty
score from features of the newest user message and its context: length, code,
math, reasoning cues, attached documents. Weights are plain numbers here, not a
trained model, so a routing decision can be explained from its features (they
are recorded with the decision) and a counterfactual replay can re-score the log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Pools from cheapest to most capable; escalation only moves right.
RANKS = ("small", "medium", "frontier")

_CODE = re.compile(r"```|\bdef |\bclass |\breturn\b|;\s*$|\{\s*$|=>|#include|\bSELECT\b|\bfunction\b", re.M)
_MATH = re.compile(r"\\(frac|int|sum|sqrt)|\b(integral|derivative|prove|theorem|lemma|equation|matrix|eigen)\w*|[=<>]\s*-?\d|\d\s*[\^*/]\s*\d", re.I)
_REASONING = re.compile(
    r"\b(step by step|reason|why|explain|compare|trade-?offs?|analy[sz]e|design|architecture|plan|evaluate|critique|prove)\b",
    re.I,
)


@dataclass(frozen=True)
class Features:
    chars: int
    context_tokens: int
    code: bool
    math: bool
    reasoning_cues: int
    documents: int


@dataclass(frozen=True)
class Thresholds:
    medium: float = 2.0  # score at or above: medium
    frontier: float = 3.5  # score at or above: frontier


def features(text: str, context_tokens: int = 0, documents: int = 0) -> Features:
    return Features(
        chars=len(text),
        context_tokens=context_tokens,
        code=bool(_CODE.search(text)),
        math=bool(_MATH.search(text)),
        reasoning_cues=len(_REASONING.findall(text)),
        documents=documents,
    )


def score(f: Features) -> float:
    s = 0.0
    s += min(f.chars / 800, 2.0)  # long asks are usually harder asks
    s += min(f.context_tokens / 6000, 1.0)  # long contexts need a model that uses them well
    s += 1.5 if f.code else 0.0
    s += 1.5 if f.math else 0.0
    s += min(f.reasoning_cues, 3) * 0.75
    s += min(f.documents, 4) * 0.75
    return s


def classify(f: Features, thresholds: Thresholds = Thresholds()) -> str:
    value = score(f)
    if value >= thresholds.frontier:
        return "frontier"
    if value >= thresholds.medium:
        return "medium"
    return "small"


def escalate(current: str | None, wanted: str) -> str:
    """Sticky with one-way escalation: never below the pool the conversation already uses."""
    if current is None:
        return wanted
    return RANKS[max(RANKS.index(current), RANKS.index(wanted))]
