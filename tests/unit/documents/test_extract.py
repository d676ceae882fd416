"""Page extraction: the right text on the right page, OCR for scans, tables as tables; the child's page timeout."""

from __future__ import annotations

import dataclasses

import pytest

from documents.errors import Refused
from documents.extract import PAGE_CHARS, Block, extract_page, page_count, paginate
from documents.pages import PageReader, PageTimeout
from documents.settings import DocumentSettings
from documents.sniff import DOCX, HTML, MARKDOWN, PDF, PNG, TEXT
from tests.fixtures import documents as fx

DISTINCTIVE = ["quayside", "pomegranate", "moraine"]


def test_text_pdf_pages_carry_their_own_text() -> None:
    data = fx.text_pdf(fx.PDF_PAGES)
    assert page_count(data, PDF) == 3
    for number, word in enumerate(DISTINCTIVE, start=1):
        page = extract_page(data, PDF, number)
        assert page.method == "text"
        assert word in page.text
        assert [w for w in DISTINCTIVE if w != word and w in page.text] == []
        assert page.blocks[0] == Block("heading", fx.PDF_PAGES[number - 1].split("\n")[0])
        assert all(b.kind == "paragraph" for b in page.blocks[1:])


def test_a_ruled_pdf_table_comes_back_as_a_table_in_place() -> None:
    page = extract_page(fx.text_pdf(fx.PDF_PAGES, tables={2: fx.TABLE}), PDF, 2)
    assert [b.kind for b in page.blocks] == ["heading", "paragraph", "paragraph", "table"]
    assert page.blocks[-1].text.split("\n")[:3] == ["| Region | Revenue | Growth |", "| --- | --- | --- |", "| North | 120 | 4% |"]
    assert "North 120" not in page.text  # the table's words are not repeated as loose text


def test_scanned_pdf_pages_are_read_by_ocr() -> None:
    data = fx.scanned_pdf(fx.SCANNED_PAGES)
    assert page_count(data, PDF) == 2
    first, second = extract_page(data, PDF, 1), extract_page(data, PDF, 2)
    assert first.method == second.method == "ocr"
    assert {"lighthouse", "keeper", "ship"} <= set(first.text.lower().replace(".", "").split())
    assert {"saffron", "silver", "market"} <= set(second.text.lower().replace(".", "").split())
    assert first.blocks[0].kind == "heading" and "Coastal" in first.blocks[0].text


def test_without_ocr_a_scanned_page_is_empty_not_invented() -> None:
    page = extract_page(fx.scanned_pdf(fx.SCANNED_PAGES), PDF, 1, ocr=False)
    assert page.method == "empty" and page.blocks == () and page.text == ""


def test_an_image_is_one_ocr_page() -> None:
    data = fx.png_of_text("Harvest notes\n\nThe quince trees flowered early this year.")
    assert page_count(data, PNG) == 1
    page = extract_page(data, PNG, 1)
    assert page.method == "ocr" and "quince" in page.text


def test_docx_pages_split_at_the_page_break_and_the_table_is_a_table() -> None:
    data = fx.docx_with_table()
    assert page_count(data, DOCX) == 2
    first, second = extract_page(data, DOCX, 1), extract_page(data, DOCX, 2)
    assert first.blocks[0] == Block("heading", "Annual review") and "zeppelin" in first.text
    assert [b.kind for b in second.blocks] == ["heading", "paragraph", "table"]
    assert second.blocks[2].text.splitlines()[0] == "| Region | Revenue | Growth |"
    assert len(second.blocks[2].text.splitlines()) == len(fx.TABLE) + 1


def test_html_main_content_without_boilerplate() -> None:
    page = extract_page(fx.html_page(), HTML, 1)
    assert page_count(fx.html_page(), HTML) == 1
    assert [b.kind for b in page.blocks] == ["heading", "paragraph", "paragraph", "heading", "table"]
    assert "marmalade" in page.text
    for boilerplate in ("tracker", "About us", "Copyright", "color"):
        assert boilerplate not in page.text


def test_markdown_headings_tables_and_form_feed_pages() -> None:
    data = b"# Title\n\nSome *text*.\n\n|a|b|\n|-|-|\n|1|2|\n\nSub\n---\n\nend\n\f# Two\n\nmore"
    data = data.replace(b"|-|-|", b"|---|---|")
    assert page_count(data, MARKDOWN) == 2
    page = extract_page(data, MARKDOWN, 1)
    assert page.blocks == (
        Block("heading", "Title"),
        Block("paragraph", "Some *text*."),
        Block("table", "| a | b |\n| --- | --- |\n| 1 | 2 |"),
        Block("heading", "Sub"),
        Block("paragraph", "end"),
    )
    assert extract_page(data, MARKDOWN, 2).blocks[0] == Block("heading", "Two")


def test_long_text_is_cut_into_pages_at_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 100 for i in range(40)]
    data = "\n\n".join(paragraphs).encode()
    count = page_count(data, TEXT)
    assert count == pytest.approx(len(data) / PAGE_CHARS, abs=2)
    seen = []
    for number in range(1, count + 1):
        page = extract_page(data, TEXT, number)
        assert len(page.text) <= PAGE_CHARS + 600
        seen += [b.text for b in page.blocks]
    assert seen == [p.strip() for p in paragraphs]  # nothing lost, nothing repeated, in order
    with pytest.raises(IndexError):
        extract_page(data, TEXT, count + 1)


def test_paginate_drops_a_trailing_break_and_keeps_empty_documents_one_page() -> None:
    a = Block("paragraph", "a")
    assert paginate([[a], []]) == [(a,)]
    assert paginate([[]]) == [()]
    assert paginate([[a], [], [a]]) == [(a,), (), (a,)]


def test_unparseable_input_is_refused_as_unreadable() -> None:
    with pytest.raises(Refused) as refused:
        page_count(b"%PDF-1.7\n" + bytes(range(256)) * 4, PDF)
    assert refused.value.code == "unreadable"


# ---------------------------------------------------------------- the child process


@pytest.fixture(scope="module")
def reader():
    with PageReader(DocumentSettings()) as r:
        yield r


def test_the_reader_serves_a_document_from_one_child_and_the_next_from_a_fresh_one(reader: PageReader) -> None:
    data = fx.text_pdf(fx.PDF_PAGES)
    assert reader.page_count(data, PDF) == 3
    child = reader._child
    pages = [reader.read(data, PDF, n) for n in (1, 2, 3)]
    assert [p for p in pages] == [extract_page(data, PDF, n) for n in (1, 2, 3)]
    assert reader._child is child
    docx = fx.docx_with_table()
    assert reader.read(docx, DOCX, 2).blocks[-1].kind == "table"
    assert reader._child.process.pid != child.process.pid  # nothing of one file stays in the process reading the next
    assert not child.home.exists()  # the first child's directory, with its copy of the file, is gone


def test_the_reader_checks_in_the_child(reader: PageReader) -> None:
    with pytest.raises(Refused) as refused:
        reader.check(fx.pdf_with_javascript(hide="object_stream"), PDF)
    assert refused.value.code in ("active_content", "malware_detected")
    reader.check(fx.text_pdf(fx.PDF_PAGES), PDF)


def test_a_slow_page_times_out_and_the_next_page_still_reads() -> None:
    dense = "Dense page\n\n" + " ".join(f"Line {i} of the long scanned ledger with many words." for i in range(120))
    data = fx.scanned_pdf([dense, "Short page\n\nThe otter swam."], dpi=200)
    settings = dataclasses.replace(DocumentSettings(), page_timeout_s=0.3, ocr_dpi=300)
    with PageReader(settings) as reader:
        assert reader.page_count(data, PDF) == 2
        first_child = reader._child.process.pid
        with pytest.raises(PageTimeout) as timeout:
            reader.read(data, PDF, 1)
        assert timeout.value.number == 1 and "PARLEY_DOCUMENTS_PAGE_TIMEOUT_S" in timeout.value.reason
        assert reader._child is None  # killed, not left running
        text = reader.read(fx.text_pdf(fx.PDF_PAGES), PDF, 2)  # a fresh child, the document reopened
        assert "pomegranate" in text.text and reader._child.process.pid != first_child


@pytest.mark.parametrize(
    ("make", "media_type"),
    [
        (lambda: fx.text_pdf(fx.PDF_PAGES), PDF),
        (fx.docx_with_table, DOCX),
        (fx.html_page, HTML),
        (lambda: b"# A\n\ntext\n\f# B\n\nmore\n\f", MARKDOWN),
        (lambda: b"one\n\ftwo\n\fthree", TEXT),
        (lambda: fx.png_of_text("One page"), PNG),
    ],
)
def test_page_count_agrees_with_extract_page(make, media_type: str) -> None:
    data = make()
    count = page_count(data, media_type)
    assert all(extract_page(data, media_type, n, ocr=False).number == n for n in range(1, count + 1))
    for outside in (0, count + 1):
        with pytest.raises(IndexError):
            extract_page(data, media_type, outside, ocr=False)
