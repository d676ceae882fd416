"""One interface for every moderation classifier: texts in, a score per category out.

``classifier_from`` picks the one the settings name: ``local`` (moderation/local.py:
a bundled linear model plus rules, nothing downloaded) or ``llama-guard``
(moderation/llama_guard.py: Llama Guard 3 served by SGLang, through the engine
client the workers use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from moderation.categories import CATEGORIES
from parley.errors import Unavailable

if TYPE_CHECKING:
    from moderation.settings import ModerationSettings


@dataclass(frozen=True)
class Scores:
    """A score in 0..1 for every category of CATEGORIES (missing ones read as 0)."""

    values: Mapping[str, float]

    def over(self, thresholds: Mapping[str, float], default: float = 0.5) -> tuple[str, ...]:
        """The categories at or above their threshold, in CATEGORIES order."""
        return tuple(c for c in CATEGORIES if self.values.get(c, 0.0) >= thresholds.get(c, default))


def scores_of(found: Mapping[str, float]) -> Scores:
    """Every category, 0 where ``found`` has none, each clipped to 0..1 (a deterministic mapping)."""
    return Scores({c: min(1.0, max(0.0, float(found.get(c, 0.0)))) for c in CATEGORIES})


class ClassifierUnavailable(Unavailable):
    """The classifier could not answer now (its engine is down or slow): callers retry, nothing is lost."""


class Classifier(Protocol):
    #: Name and version, recorded on every ModerationResult and answered by POST /v1/moderations.
    model: str

    async def classify(self, texts: Sequence[str]) -> list[Scores]: ...


def classifier_from(settings: ModerationSettings) -> Classifier:
    if settings.classifier == "local":
        from moderation.local import LocalClassifier

        return LocalClassifier()
    if settings.classifier == "llama-guard":
        if not settings.engine_url:
            raise ValueError("PARLEY_MODERATION_CLASSIFIER=llama-guard needs PARLEY_MODERATION_ENGINE_URL (its SGLang engine)")
        from moderation.llama_guard import LlamaGuard
        from workers.sglang import SGLangClient

        return LlamaGuard(SGLangClient(settings.engine_url, timeout_s=settings.timeout_s), settings.guard_model)
    raise ValueError(f"PARLEY_MODERATION_CLASSIFIER must be local or llama-guard, got {settings.classifier!r}")
