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


class LocalClassifier:
    def __init__(self) -> None:
        from profanity_check import predict_prob  # loads the bundled model

        self._predict = predict_prob
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
