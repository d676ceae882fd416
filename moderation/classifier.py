"""What a classifier gives: a score per category for each text, and the one interface both classifiers keep.

``LocalClassifier`` (moderation/local.py) runs in process with no download;
``LlamaGuard`` (moderation/llama_guard.py) asks Llama Guard 3 served by SGLang.
``classifier_from`` picks one from ``PARLEY_MODERATION_CLASSIFIER``;
``judge`` asks one for one text's verdict, trying again while it gives none.

A classifier that gives no verdict has failed the check; nothing here reads
it as "not flagged"::

    Unavailable (parley/errors.py)
     └── ClassifierUnavailable   no verdict this time: down, an HTTP error, a timeout …
          ├── NotAVerdict        … or an answer that is not a verdict (empty, garbled, an unknown
          │                      category, cut short); its message names the shape, never the text
          └── NoVerdict          ``judge`` gave up: none by its deadline (callers fail closed)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from moderation.categories import CATEGORIES, parent
from parley.errors import Unavailable
from parley.metrics import MODERATION_CLASSIFIER_FAILURES

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


log = logging.getLogger(__name__)


class ClassifierUnavailable(Unavailable):
    """The classifier gave no verdict this time (its engine is down, failed or timed out the call, or it
    answered something else): the check failed, and callers try it again."""


class NotAVerdict(ClassifierUnavailable):
    """The classifier answered, but not with a verdict. The message says how (never the answer's text,
    which may echo the text judged)."""


class NoVerdict(ClassifierUnavailable):
    """``judge`` gave up: the classifier gave no verdict by the deadline."""


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


async def judge(
    classifier: Classifier,
    text: str,
    *,
    timeout_s: float,
    give_up_s: float,
    first_pause_s: float = 0.2,
    max_pause_s: float = 5.0,
    ids: Mapping[str, object] | None = None,
) -> Scores:
    """``text``'s scores. A try that gives no verdict (``ClassifierUnavailable``, none within
    ``timeout_s``, or any other exception) is tried again, backing off from ``first_pause_s`` to ``max_pause_s``; once
    ``give_up_s`` have passed without one, ``NoVerdict``. Each failure is logged with ``ids``, never text."""
    deadline = time.monotonic() + give_up_s
    pause, tries = first_pause_s, 0
    while True:
        tries += 1
        try:
            async with asyncio.timeout(timeout_s):
                answer = await classifier.classify([text])
            if len(answer) != 1 or not isinstance(answer[0], Scores):
                raise NotAVerdict(f"{len(answer)} answers to one text")
            return answer[0]
        except TimeoutError:
            reason, error = "timeout", f"no answer within {timeout_s:g} s"
        except NotAVerdict as exc:
            reason, error = "not_a_verdict", str(exc)
        except ClassifierUnavailable as exc:
            reason, error = "unavailable", str(exc)
        except Exception as exc:  # a bug in a classifier is no pass either; its words may hold the text: type only
            reason, error = "error", f"{type(exc).__name__} (a classifier bug: see its tests)"
        MODERATION_CLASSIFIER_FAILURES.labels(reason).inc()
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoVerdict(f"no verdict in {tries} tries over {give_up_s:g} s; the last: {error}")
        log.warning(
            "a moderation check gave no verdict; trying again",
            extra={**(ids or {}), "attempt": tries, "reason": reason, "retry_in_s": min(pause, left), "error": error},
        )
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, max_pause_s)
