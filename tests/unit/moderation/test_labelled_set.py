"""bench.moderation's labelled set: its halves are fixed by the texts themselves, and its labels are categories."""

from bench.moderation_public import load, split_of
from bench.moderation_set import EXAMPLES, FIRST, SPLITS
from moderation.categories import CATEGORIES


def test_every_example_is_in_one_half_and_texts_are_not_repeated():
    assert {e.split for e in EXAMPLES} == set(SPLITS)
    assert len({e.text for e in EXAMPLES}) == len(EXAMPLES)  # a text in both halves would leak the held-out one


def test_halves_added_since_the_first_set_follow_the_hash_of_the_text():
    later = EXAMPLES[len(FIRST):]
    assert later and all(e.split == split_of(e.text) for e in later)
    assert [e.split for e in FIRST[:4]] == ["tuning", "held-out", "tuning", "held-out"]  # the first set's, by position


def test_the_public_file_records_the_half_of_each_row_and_every_label_is_a_category():
    rows = load()  # refuses a row moved to the other half
    assert len(rows) > 500 and {r["split"] for r in rows} == set(SPLITS)
    assert all(c in CATEGORIES for e in EXAMPLES for c in e.flagged)
    assert all((e.kind == "positive") == bool(e.flagged) for e in EXAMPLES)
