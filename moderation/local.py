"""``LocalClassifier``: moderation in process, with no download — an offensive-language SVM plus rules.

alt-profanity-check ships a linear SVM (TF-IDF over words, calibrated to a
probability by five sigmoids) trained on offensive and non-offensive tweets.
It knows insults and abuse, not topics: "how do I make a pipe bomb" is polite
to it. So its probability goes to ``harassment`` (what offensive language
aimed at someone is), and moderation/rules.py covers the other categories.
Aimed at no one ("this traffic is fucking awful", "I hate broccoli"), the
probability is cut below the default threshold (``UNDIRECTED``): swearing
or disliking a thing is not harassment.

The SVM is read once, at construction, from the package's joblib files, and
then evaluated here as the arithmetic it is (a sparse dot product and five
sigmoids): scikit-learn's ``predict_proba`` checks its input on every call
and takes ~2 ms a text; this takes tens of microseconds, with the same
result (tests/unit/moderation/test_local.py compares them).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from importlib.metadata import version

import numpy as np

from moderation import rules
from moderation.classifier import Scores

VERSION = 2  # of the rules and the mapping below: bump when either changes, results record it
UNDIRECTED = 0.45  # weight of the SVM's probability when the text addresses no one: alone it never reaches 0.5
DIRECTED = re.compile(
    r"\b(?:you|your|you'?re|yourself|yourselves|u|ur|ya|yours)\b|^(?:fuck|piss|bugger) off\b|^(?:go to hell|screw you|get lost)"
)


class ProfanitySvm:
    """alt-profanity-check's calibrated linear SVM: ``probability(text)`` equals its ``predict_prob([text])[0]``."""

    def __init__(self) -> None:
        from profanity_check import profanity_check  # unpickles the vectorizer and the model, once per process

        vectorizer, model = profanity_check.vectorizer, profanity_check.model
        self._analyse = vectorizer.build_analyzer()  # lower case, \w\w+ tokens, English stop words dropped
        self._vocabulary: dict[str, int] = vectorizer.vocabulary_
        self._idf = np.asarray(vectorizer.idf_)
        folds = model.calibrated_classifiers_
        self._coef = np.stack([fold.estimator.coef_[0] for fold in folds])  # (folds, terms)
        self._intercept = np.array([fold.estimator.intercept_[0] for fold in folds])
        self._a = np.array([fold.calibrators[0].a_ for fold in folds])
        self._b = np.array([fold.calibrators[0].b_ for fold in folds])

    def probability(self, text: str) -> float:
        counts = Counter(t for t in self._analyse(text) if t in self._vocabulary)
        decision = self._intercept
        if counts:
            index = np.fromiter((self._vocabulary[t] for t in counts), dtype=np.intp, count=len(counts))
            tfidf = np.fromiter(counts.values(), dtype=float, count=len(counts)) * self._idf[index]
            decision = self._coef[:, index] @ (tfidf / np.linalg.norm(tfidf)) + self._intercept
        # scikit-learn's _SigmoidCalibration: P(offensive) = 1 / (1 + exp(a·d + b)), averaged over the folds.
        return float(np.mean(1.0 / (1.0 + np.exp(self._a * decision + self._b))))


class LocalClassifier:
    def __init__(self) -> None:
        self._svm = ProfanitySvm()
        self.model = f"parley-local/{VERSION} (alt-profanity-check {version('alt-profanity-check')})"

    def scores(self, text: str) -> Scores:
        """One text's scores: the rules' hits, and the SVM's probability as harassment."""
        seen = rules.neutralise(text)
        hits = rules.match(seen)
        offensive = self._svm.probability(seen)
        if not DIRECTED.search(seen):
            offensive *= UNDIRECTED
        hits["harassment"] = max(hits.get("harassment", 0.0), offensive)
        return Scores.of(hits)

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        # In line, not in a thread: a text takes well under a millisecond (bench/moderation.py).
        return [self.scores(text) for text in texts]
