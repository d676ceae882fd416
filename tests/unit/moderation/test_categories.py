import pytest

from moderation.categories import CATEGORIES, LLAMA_GUARD_3, parent


def test_categories_are_openais_in_openais_order():
    assert CATEGORIES == (
        "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
        "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence",
        "violence/graphic",
    )


def test_parent_of_a_sub_category_and_of_a_parent():
    assert parent("violence/graphic") == "violence"
    assert parent("self-harm/intent") == "self-harm"
    assert parent("hate") == "hate"


def test_parent_refuses_an_unknown_category():
    with pytest.raises(ValueError, match="violence/gore"):
        parent("violence/gore")


def test_llama_guard_3_codes_map_to_known_categories():
    assert list(LLAMA_GUARD_3) == [f"S{i}" for i in range(1, 15)]
    assert all(c in CATEGORIES for categories in LLAMA_GUARD_3.values() for c in categories)
    assert LLAMA_GUARD_3["S4"] == ("sexual/minors",)
    assert LLAMA_GUARD_3["S10"] == ("hate",)
    assert LLAMA_GUARD_3["S11"] == ("self-harm",)
    assert LLAMA_GUARD_3["S8"] == ()  # intellectual property: no OpenAI category
