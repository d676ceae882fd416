"""Policy per tier: defaults, what blocks, thresholds, modes; a bad policy names what is wrong."""

from __future__ import annotations

import pytest

from moderation.categories import CATEGORIES
from moderation.classifier import Scores, scores_of
from moderation.policy import policy_from


def scored(**values: float) -> Scores:
    return scores_of({k.replace("_", "/"): v for k, v in values.items()})


def test_the_default_blocks_every_category_at_one_half_beside_the_generation() -> None:
    policy = policy_from("")
    for tier in ("free", "plus", "enterprise", "unknown-tier"):
        p = policy.for_tier(tier)
        assert p.mode == "parallel" and not p.retain_flagged and p.block == frozenset(CATEGORIES)
    assert policy.for_tier("free").flags(scored(violence=0.5, hate=0.49)) == ("violence",)


def test_a_tier_chooses_its_categories_thresholds_mode_and_retention() -> None:
    policy = policy_from(
        '{"enterprise": {"block": ["violence", "sexual/minors"], "thresholds": {"violence": 0.8}, '
        '"mode": "strict", "retain_flagged": true}}'
    )
    p = policy.for_tier("enterprise")
    assert p.flags(scored(violence=0.7, hate=0.99, sexual_minors=0.5)) == ("sexual/minors",)
    assert p.flags(scored(violence=0.85)) == ("violence",)
    assert p.mode == "strict" and p.retain_flagged
    assert policy.for_tier("free").mode == "parallel"  # other tiers keep the defaults


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ('["free"]', "object of tiers"),
        ('{"gold": {}}', "unknown tier 'gold'"),
        ('{"free": {"colour": 1}}', "unknown key 'colour'"),
        ('{"free": {"block": ["violence/cartoon"]}}', "unknown moderation category 'violence/cartoon'"),
        ('{"free": {"thresholds": {"violence": 1.5}}}', "thresholds.violence"),
        ('{"free": {"mode": "lazy"}}', "mode must be one of parallel, strict"),
        ('{"free": {"retain_flagged": "yes"}}', "retain_flagged must be true or false"),
    ],
)
def test_a_bad_policy_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy_from(text)
