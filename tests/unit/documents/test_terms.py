"""Keyword terms: what indexing and querying share, so a question's words meet the page's."""

from __future__ import annotations

from documents.terms import MAX_TERM_CHARS, terms


def test_words_are_casefolded_and_stemmed_so_forms_of_a_word_meet() -> None:
    assert terms("Reported revenues") == terms("report REVENUE") == ["report", "revenu"]
    assert terms("running runs") == ["run", "run"]


def test_stopwords_and_single_letters_are_dropped() -> None:
    assert terms("What is the cost of a unit, e.g. in the EU?") == ["cost", "unit", "eu"]
    assert terms("the of and") == []


def test_codes_and_numbers_are_kept_whole_and_unstemmed() -> None:
    assert terms("Q3 2024 revenue for ACME-7 rose 3.5% (v2.1, EU/2024)") == [
        "q3", "2024", "revenu", "acme-7", "rose", "3.5", "v2.1", "eu/2024",
    ]
    assert terms("ACME-7.") == terms("acme-7") == ["acme-7"]


def test_hyphenated_words_are_their_words() -> None:
    assert terms("cost-cutting well-known") == ["cost", "cut", "well", "known"]


def test_repeats_are_kept_for_term_frequency() -> None:
    assert terms("audit audit audits") == ["audit"] * 3


def test_unicode_words_are_words() -> None:
    assert terms("Größe naïve café") == ["grösse", "naïv", "café"]


def test_pdf_ligatures_read_as_letters() -> None:
    assert terms("ﬁnancial proﬁt") == terms("financial profit")


def test_overlong_tokens_are_noise() -> None:
    assert terms("x" * (MAX_TERM_CHARS + 1) + " budget") == ["budget"]
