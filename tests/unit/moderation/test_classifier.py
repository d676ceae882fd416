import pytest

from moderation.categories import CATEGORIES
from moderation.classifier import Scores, classifier_from
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
