"""What a classifier gives: a score per category for each text, and the one interface both classifiers keep.

``LocalClassifier`` (moderation/local.py) runs in process with no download;
``LlamaGuard`` (moderation/llama_guard.py) asks Llama Guard 3 served by SGLang.
``classifier_from`` picks one from ``PARLEY_MODERATION_CLASSIFIER``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from moderation.categories import CATEGORIES, parent
from parley.errors import Unavailable

if TYPE_CHECKING:
    from moderation.settings import ModerationSettings


@dataclass(frozen=True)
class Scores:
    """One text's scores: every category of ``CATEGORIES``, each in [0, 1]."""

    values: Mapping[str, float]

    def __post_init__(self) -> None:
        missing = [c for c in CATEGORIES if c not in self.values]
        unknown = [c for c in self.values if c not in CATEGORIES]
        if missing or unknown:
            raise ValueError(f"scores need exactly CATEGORIES (missing {missing}, unknown {unknown})")
        wrong = [c for c, v in self.values.items() if not 0.0 <= v <= 1.0]
        if wrong:
            raise ValueError(f"scores outside [0, 1] for {wrong}")

    @classmethod
    def of(cls, hits: Mapping[str, float]) -> Scores:
        """Scores from the categories some evidence hit (the rest 0); a sub-category lifts its parent to its score."""
        values = dict.fromkeys(CATEGORIES, 0.0)
        for category, score in hits.items():
            for c in (category, parent(category)):
                values[c] = max(values[c], score)
        return cls(MappingProxyType(values))

    def over(self, thresholds: Mapping[str, float], default: float = 0.5) -> tuple[str, ...]:
        """The categories at or above their threshold (``default`` where none is given), in CATEGORIES order."""
        return tuple(c for c in CATEGORIES if self.values[c] >= thresholds.get(c, default))


class ClassifierUnavailable(Unavailable):
    """The classifier could not answer now (its engine is down or failed the call): callers retry, nothing is lost."""


class Classifier(Protocol):
    #: Name and version, recorded on every moderation result (which model judged it, for review and audits).
    model: str

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        """One ``Scores`` per text, in order."""
        ...


def classifier_from(settings: ModerationSettings) -> Classifier:
    """The classifier ``PARLEY_MODERATION_CLASSIFIER`` names: "local" (default) or "llama-guard"."""
    if settings.classifier == "local":
        from moderation.local import LocalClassifier

        return LocalClassifier()
    if settings.classifier == "llama-guard":
        if not settings.engine_url:
            raise ValueError(
                "PARLEY_MODERATION_CLASSIFIER=llama-guard needs PARLEY_MODERATION_ENGINE_URL (the SGLang engine serving it)"
            )
        from moderation.llama_guard import LlamaGuard
        from workers.sglang import SGLangClient

        return LlamaGuard(SGLangClient(settings.engine_url, timeout_s=settings.timeout_s), settings.guard_model)
    raise ValueError(f"PARLEY_MODERATION_CLASSIFIER={settings.classifier!r}: use 'local' or 'llama-guard'")
