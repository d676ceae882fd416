"""Chunking: exact offsets, sections across pages, budgets, tables whole or split by rows, stable ids."""

from __future__ import annotations

import uuid

from documents.chunking import Chunk, chunk_id, chunk_page, estimate_tokens
from documents.extract import Block, Page, extract_page, markdown_table
from documents.sniff import DOCX, PDF
from parley.ids import NS
from tests.fixtures import documents as fx

LONG = " ".join(f"Sentence {i} says something about topic {i % 7} at some length." for i in range(60))
ROWS = [["Name", "Value"]] + [[f"row{i}", str(i * 3)] for i in range(80)]
PAGE = Page(
    4,
    (
        Block("paragraph", "Intro before any heading."),
        Block("heading", "Chapter one"),
        Block("heading", "Part A"),
        Block("paragraph", LONG),
        Block("paragraph", "Short after."),
        Block("heading", "Numbers"),
        Block("table", markdown_table(ROWS)),
        Block("paragraph", "Tail."),
    ),
    "text",
)


def _exact(page: Page, chunks: list[Chunk]) -> None:
    for c in chunks:
        assert page.text[c.char_start : c.char_end] == c.text
        assert c.page == page.number and c.chunk_id == chunk_id(c.document_id, c.page, c.ordinal)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


def test_offsets_are_exact_and_budgets_hold() -> None:
    chunks, section = chunk_page("doc-1", PAGE, section="Preface", budget_tokens=100, overlap_tokens=20)
    _exact(PAGE, chunks)
    assert section == "Numbers"
    assert chunks[0].section == "Preface" and chunks[0].text == "Intro before any heading."
    assert chunks[1].text.startswith("Chapter one\n\nPart A\n\nSentence 0") and chunks[1].section == "Part A"
    for c in chunks:
        assert estimate_tokens(c.full_text) <= 100 + estimate_tokens("Chapter one Part A") or c.kind == "table"


def test_a_long_paragraph_is_split_at_sentences_with_overlap() -> None:
    chunks, _ = chunk_page("doc-1", PAGE, budget_tokens=100, overlap_tokens=20)
    pieces = [c for c in chunks if "Sentence" in c.text]
    assert len(pieces) > 3
    for a, b in zip(pieces, pieces[1:]):
        assert a.char_start < b.char_start < a.char_end  # overlapping spans
        assert b.text.startswith("Sentence ")  # cut at a sentence start
        assert 0 < estimate_tokens(PAGE.text[b.char_start : a.char_end]) <= 20
    covered = "".join(PAGE.text[max(c.char_start, prev_end) : c.char_end] for c, prev_end in _with_prev_end(pieces))
    assert LONG in covered  # nothing lost between pieces


def _with_prev_end(chunks: list[Chunk]):
    end = 0
    for c in chunks:
        yield c, end
        end = c.char_end


def test_a_long_table_is_split_by_rows_with_the_header_repeated() -> None:
    chunks, _ = chunk_page("doc-1", PAGE, budget_tokens=100, overlap_tokens=20)
    tables = [c for c in chunks if c.kind == "table"]
    assert len(tables) > 2
    assert tables[0].header == "" and tables[0].text.startswith("| Name | Value |\n| --- | --- |")
    for c in tables[1:]:
        assert c.header == "| Name | Value |\n| --- | --- |"
        assert c.full_text.startswith(c.header + "\n| row")
        assert not c.text.startswith("| Name")
    rows = [line for c in tables for line in c.text.splitlines() if line.startswith("| row")]
    assert rows == [line for line in markdown_table(ROWS).splitlines() if line.startswith("| row")]


def test_a_small_table_is_one_chunk_and_paragraphs_are_packed() -> None:
    page = extract_page(fx.docx_with_table(), DOCX, 2)
    chunks, section = chunk_page("doc-2", page, section="Annual review")
    _exact(page, chunks)
    assert [c.kind for c in chunks] == ["text", "table"]
    assert chunks[0].text == "Regional figures\n\nRevenue is in thousands of euros."
    assert chunks[1].text == page.blocks[-1].text and chunks[1].section == "Regional figures" == section


def test_sections_continue_across_pages() -> None:
    data = fx.text_pdf(["Opening\n\nFirst page body.", "Second page body without a heading of its own."])
    first, second = extract_page(data, PDF, 1), extract_page(data, PDF, 2)
    chunks1, section = chunk_page("doc-3", first)
    second = Page(2, tuple(b for b in second.blocks if b.kind != "heading"), "text")
    chunks2, _ = chunk_page("doc-3", second, section=section)
    assert section == "Opening" and chunks2[0].section == "Opening" and chunks2[0].page == 2


def test_ids_are_stable_and_derived_from_document_page_and_ordinal() -> None:
    a, _ = chunk_page("doc-1", PAGE, budget_tokens=100)
    b, _ = chunk_page("doc-1", PAGE, budget_tokens=100)
    assert a == b
    assert a[0].chunk_id == str(uuid.uuid5(NS, "doc-1:4:0")) == chunk_id("doc-1", 4, 0)
    other, _ = chunk_page("doc-9", PAGE, budget_tokens=100)
    assert {c.chunk_id for c in a}.isdisjoint(c.chunk_id for c in other)


def test_an_empty_page_has_no_chunks_and_keeps_the_section() -> None:
    assert chunk_page("doc-1", Page(3, (), "empty"), section="Kept") == ([], "Kept")


def test_an_overlong_sentence_is_cut_at_words() -> None:
    page = Page(1, (Block("paragraph", " ".join(f"w{i}" for i in range(500))),), "text")
    chunks, _ = chunk_page("d", page, budget_tokens=50, overlap_tokens=0)
    _exact(page, chunks)
    assert all(estimate_tokens(c.text) <= 50 for c in chunks)
    assert " ".join(c.text for c in chunks) == page.text


def test_a_custom_token_counter_is_used() -> None:
    chunks, _ = chunk_page("d", PAGE, budget_tokens=10_000, count_tokens=lambda s: len(s) // 4)
    assert [c.kind for c in chunks] == ["text", "text", "text", "table", "text"]
