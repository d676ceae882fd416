import asyncio

import pytest

from moderation.categories import CATEGORIES
from moderation.classifier import ClassifierUnavailable, NoVerdict, NotAVerdict, Scores, classifier_from, judge
from moderation.llama_guard import LlamaGuard
from moderation.local import LocalClassifier
from moderation.settings import ModerationSettings
from parley.settings import from_env


def test_of_fills_every_category_and_lifts_the_parent():
    scores = Scores.of({"violence/graphic": 0.9, "hate": 0.2})
    assert set(scores.values) == set(CATEGORIES)
    assert scores.values["violence"] == 0.9
    assert scores.values["hate"] == 0.2
    assert scores.values["sexual"] == 0.0


def test_of_keeps_a_parent_higher_than_its_child():
    assert Scores.of({"violence": 0.95, "violence/graphic": 0.6}).values["violence"] == 0.95


def test_over_is_at_or_above_each_threshold_in_category_order():
    scores = Scores.of({"violence/graphic": 0.5, "harassment": 0.4, "sexual": 0.7})
    assert scores.over({}) == ("sexual", "violence", "violence/graphic")
    assert scores.over({"sexual": 0.8, "harassment": 0.4}) == ("harassment", "violence", "violence/graphic")
    assert scores.over({}, default=0.6) == ("sexual",)


@pytest.mark.parametrize("values", [{"hate": 0.5}, {**dict.fromkeys(CATEGORIES, 0.0), "hate": 1.5}])
def test_scores_refuse_missing_categories_and_out_of_range_values(values):
    with pytest.raises(ValueError):
        Scores(values)


def test_classifier_from_settings():
    assert isinstance(classifier_from(ModerationSettings()), LocalClassifier)
    guard = classifier_from(ModerationSettings(classifier="llama-guard", engine_url="http://guard:30000"))
    assert isinstance(guard, LlamaGuard) and guard.model == "meta-llama/Llama-Guard-3-1B"


def test_classifier_from_names_the_setting_to_change():
    with pytest.raises(ValueError, match="PARLEY_MODERATION_ENGINE_URL"):
        classifier_from(ModerationSettings(classifier="llama-guard"))
    with pytest.raises(ValueError, match="PARLEY_MODERATION_CLASSIFIER"):
        classifier_from(ModerationSettings(classifier="openai"))


def test_settings_read_from_the_environment():
    settings = from_env(ModerationSettings, {"PARLEY_MODERATION_WINDOW_TOKENS": "120", "PARLEY_MODERATION_CLASSIFIER": "llama-guard"})
    assert (settings.window_tokens, settings.overlap_tokens, settings.classifier) == (120, 50, "llama-guard")


def test_settings_refuse_an_overlap_as_long_as_the_window():
    with pytest.raises(ValueError, match="PARLEY_MODERATION_OVERLAP_TOKENS"):
        ModerationSettings(window_tokens=50, overlap_tokens=50)


# ------------------------------------------------------------------ judge: no verdict is a failed check, never a pass


class Answers:
    """A classifier that gives each try's answer in turn: a list of Scores, an exception to raise, or "hang"."""

    model = "test/1"

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.tries = 0

    async def classify(self, texts):  # type: ignore[no-untyped-def]
        self.tries += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer == "hang":
            await asyncio.sleep(3600)
        if isinstance(answer, Exception):
            raise answer
        return answer


CLEAN = Scores.of({})
FLAGGED = Scores.of({"violence": 0.9})
NO_VERDICTS = [
    ClassifierUnavailable("engine down"),
    NotAVerdict("garbled"),
    "hang",  # no answer within timeout_s
    [],  # no answer for the text
    [CLEAN, CLEAN],  # two answers to one text
    [{"violence": 0.9}],  # something that is not Scores
    KeyError("my secret text"),  # a bug in the classifier: no pass either
]
KINDS = ["unavailable", "not-a-verdict", "timeout", "none", "two", "not-scores", "bug"]


@pytest.mark.parametrize("failure", NO_VERDICTS, ids=KINDS)
async def test_judge_tries_again_after_each_kind_of_no_verdict(failure):
    classifier = Answers(failure, failure, [FLAGGED])
    scores = await judge(classifier, "t", timeout_s=0.01, give_up_s=60, first_pause_s=0.001)
    assert scores is FLAGGED and classifier.tries == 3


@pytest.mark.parametrize("failure", NO_VERDICTS, ids=KINDS)
async def test_judge_gives_up_with_no_verdict_never_a_pass(failure):
    classifier = Answers(failure)
    with pytest.raises(NoVerdict, match="no verdict in") as raised:
        await judge(classifier, "my secret text", timeout_s=0.01, give_up_s=0.05, first_pause_s=0.001)
    assert classifier.tries >= 2 and "secret" not in str(raised.value)
    assert isinstance(raised.value, ClassifierUnavailable)  # where the caller cannot wait (POST /v1/moderations): a 503


async def test_judge_backs_off_up_to_its_cap(monkeypatch):
    pauses: list[float] = []

    async def sleep(s: float) -> None:
        pauses.append(s)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    classifier = Answers(*[ClassifierUnavailable("down")] * 6, [CLEAN])
    assert await judge(classifier, "t", timeout_s=1, give_up_s=3600, first_pause_s=0.5, max_pause_s=3) is CLEAN
    assert pauses == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
