"""The local classifier: alt-profanity-check's bundled linear SVM plus phrase rules, nothing downloaded.

The SVM (trained on offensive-language data, shipped inside the wheel) is read
as ``harassment``: insults and abuse aimed at someone are what it separates
best. Its probability is rescaled so everyday words it over-reads ("this
joke killed me" ≈ 0.57, "shoot a photo" ≈ 0.40) stay under a 0.5 threshold and
plain abuse ("you worthless idiot" ≈ 1.0) stays at the top. Everything else
comes from moderation/rules.py. Both read the text after the rules' safe
look-alikes are removed. Microseconds a text; the SVM loads once (~2 s).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from importlib.metadata import version

from moderation.classifier import Scores, scores_of

from moderation.rules import HINT_SCORE, normalise, rule_scores, without_lookalikes

_ADDRESSED = re.compile(r"\b(?:you|u|your|ya)\b")

#: SVM probability at which harassment starts to score, and the span over which it reaches 1.
SVM_FLOOR = 0.65
SVM_SPAN = 1.0 - SVM_FLOOR
#: Batches above this size are scored off the event loop.
BATCH_INLINE = 64


class BundledSvm:
    """alt-profanity-check's model, evaluated directly: the same probabilities as its ``predict_prob``
    (a unit test holds them equal), without scikit-learn's per-call checks, which cost ~4 ms a text
    against ~0.7 ms here. The model is a CalibratedClassifierCV of LinearSVCs with sigmoid calibration:
    p = mean over folds of 1 / (1 + exp(a·(w·x + b₀) + b))."""

    def __init__(self) -> None:
        import numpy as np
        from profanity_check import profanity_check as bundled  # loads the vectorizer and model from the wheel

        folds = bundled.model.calibrated_classifiers_
        self._np = np
        self._vectorizer = bundled.vectorizer
        self._w = np.vstack([f.estimator.coef_.ravel() for f in folds]).T
        self._b0 = np.array([f.estimator.intercept_[0] for f in folds])
        self._a = np.array([f.calibrators[0].a_ for f in folds])
        self._b = np.array([f.calibrators[0].b_ for f in folds])

    def __call__(self, texts: Sequence[str]) -> list[float]:
        np = self._np
        decision = self._vectorizer.transform(list(texts)) @ self._w + self._b0
        return [float(p) for p in (1.0 / (1.0 + np.exp(self._a * decision + self._b))).mean(axis=1)]


class LocalClassifier:
    def __init__(self) -> None:
        self._predict = BundledSvm()
        self.model = f"parley-local/1 (alt-profanity-check {version('alt-profanity-check')} + rules)"

    def scores(self, text: str) -> Scores:
        return self.score_all([text])[0]

    def score_all(self, texts: Sequence[str]) -> list[Scores]:
        cleaned = [without_lookalikes(normalise(t)) for t in texts]
        probs = self._predict(cleaned) if cleaned else []
        out = []
        for text, prob in zip(cleaned, probs):
            found = dict(rule_scores(text))
            harassment = max(0.0, (float(prob) - SVM_FLOOR) / SVM_SPAN) if text.strip() else 0.0
            if "self-harm" in found and not _ADDRESSED.search(text):
                harassment = min(harassment, HINT_SCORE)  # "I want to die" is about the writer, aimed at no one
            found["harassment"] = max(found.get("harassment", 0.0), round(harassment, 4))
            out.append(scores_of(found))
        return out

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        if len(texts) <= BATCH_INLINE:
            return self.score_all(texts)
        return await asyncio.to_thread(self.score_all, texts)
