import json

import pytest

from moderation.categories import CATEGORIES
from moderation.classifier import Scores
from moderation.policy import TierPolicy, org_policies_from, org_policy_from, policy_from


def test_empty_policy_blocks_everything_at_half_in_parallel():
    policy = policy_from("")
    for tier in ("free", "plus", "enterprise"):
        tp = policy.for_tier(tier)
        assert tp.block == frozenset(CATEGORIES)
        assert (tp.default_threshold, tp.mode, tp.retain_flagged) == (0.5, "parallel", False)


def test_unknown_tier_gets_free():
    policy = policy_from('{"free": {"mode": "strict"}, "plus": {"mode": "parallel"}}')
    assert policy.for_tier("trial").mode == "strict"
    assert policy.for_tier("plus").mode == "parallel"


def test_an_organisation_adds_categories_and_lowers_thresholds_over_its_tier():
    tier = policy_from(
        '{"plus": {"block": ["sexual", "hate"], "thresholds": {"hate": 0.4}, "mode": "strict", "retain_flagged": true}}'
    ).for_tier("plus")
    own = org_policy_from({"block": ["violence"], "thresholds": {"sexual": 0.2}, "default_threshold": 0.45})
    mixed = own.over(tier)
    assert mixed.block == {"sexual", "hate", "violence"}
    assert (mixed.thresholds["sexual"], mixed.thresholds["hate"], mixed.thresholds["violence"]) == (0.2, 0.4, 0.45)
    assert mixed.default_threshold == 0.45
    assert (mixed.mode, mixed.retain_flagged) == ("strict", True)  # the operator's, per tier
    assert org_policy_from(json.loads(json.dumps(own.to_json()))) == own


@pytest.mark.parametrize(
    "loosening",
    [{"block": []}, {"thresholds": {"violence": 1.0}}, {"default_threshold": 1.0}, {}],
)  # fmt: skip
def test_an_organisation_can_never_loosen_its_tier(loosening):
    tier = policy_from('{"free": {"thresholds": {"violence": 0.3}}}').for_tier("free")
    mixed = org_policy_from(loosening).over(tier)
    assert mixed.block == tier.block
    assert mixed.thresholds["violence"] == 0.3 and mixed.default_threshold == 0.5
    threat = Scores.of({"violence": 0.6})
    assert mixed.flags(threat) == tier.flags(threat) == ("violence",)


@pytest.mark.parametrize(
    "raw, named",
    [({"mode": "parallel"}, "mode"), ({"retain_flagged": True}, "retain_flagged"), ({"block": ["nope"]}, "nope"),
     ({"thresholds": {"violence": 2}}, "violence"), ([], "object")],
)  # fmt: skip
def test_an_organisation_s_policy_refuses_what_it_may_not_set_by_name(raw, named):
    with pytest.raises(ValueError, match=named):
        org_policy_from(raw)


def test_stored_policies_that_no_longer_parse_fall_back_to_the_tier(caplog):
    out = org_policies_from({"o_a": '{"block": ["violence"]}', "o_b": '{"block": ["renamed/category"]}'})
    assert set(out) == {"o_a"} and [r.org_id for r in caplog.records] == ["o_b"]


def test_tier_settings_are_read():
    tp = policy_from(
        '{"enterprise": {"block": ["sexual/minors", "violence"], "thresholds": {"violence": 0.8},'
        ' "default_threshold": 0.4, "mode": "strict", "retain_flagged": true}}'
    ).for_tier("enterprise")
    assert tp.block == {"sexual/minors", "violence"}
    assert (tp.thresholds["violence"], tp.default_threshold, tp.mode, tp.retain_flagged) == (0.8, 0.4, "strict", True)


def test_flags_only_blocking_categories_over_their_threshold():
    tp = TierPolicy(block=frozenset({"sexual", "violence"}), thresholds={"violence": 0.8})
    scores = Scores.of({"sexual": 0.5, "violence": 0.7, "harassment": 0.99})
    assert tp.flags(scores) == ("sexual",)
    assert tp.flags(Scores.of({"violence/graphic": 0.8})) == ("violence",)  # the parent blocks; the child is not listed


@pytest.mark.parametrize(
    "text, named",
    [
        ('{"gold": {}}', "'gold'"),
        ('{"free": {"blok": []}}', "'blok'"),
        ('{"free": {"block": ["violence/gore"]}}', "'violence/gore'"),
        ('{"free": {"thresholds": {"sexuality": 0.3}}}', "'sexuality'"),
        ('{"free": {"mode": "fast"}}', "'fast'"),
        ('{"free": {"thresholds": {"sexual": 1.5}}}', "sexual"),
        ('{"free": {"default_threshold": true}}', "default_threshold"),
        ('{"free": {"retain_flagged": "yes"}}', "retain_flagged"),
        ('{"free": []}', "free"),
        ("[]", "PARLEY_MODERATION_POLICY"),
        ("{free: 1}", "not JSON"),
    ],
)
def test_policy_errors_name_what_is_wrong(text, named):
    with pytest.raises(ValueError, match=named.replace("[", r"\[")):
        policy_from(text)
