"""Pages of a document: blocks of text (headings, paragraphs, tables) with the way they were read.

``page_count`` and ``extract_page`` are the whole interface; each opens the
document, so a caller reading many pages uses ``open_document`` once (the
extraction child in ``pages`` does). The formats live in ``documents.formats``.

What a page is:

- PDF: its own pages. Text with layout from pdfplumber (lines grouped into
  paragraphs by spacing, headings by font size or bold), ruled tables kept as
  tables. A page with no text layer, or only a few characters, is rendered
  with pypdfium2 and read by tesseract (method ``"ocr"``).
- PNG and JPEG: one page, read by tesseract.
- DOCX, HTML, Markdown and plain text have no pages of their own. They are
  cut at explicit page breaks (DOCX page breaks, form feeds), and otherwise
  into pages of about ``PAGE_CHARS`` characters at block boundaries, so a
  citation's "p. 3" points at a stable, readable span. A single block longer
  than that is not split: it makes a long page.

A table's text is a Markdown pipe table (header row, ``---`` row, rows), so it
reads as a table to the model and survives chunking whole.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from documents.errors import Refused
from documents.sniff import DOCX, HTML, JPEG, MARKDOWN, PDF, PNG, TEXT

#: Size of the "pages" cut from formats without pages of their own.
PAGE_CHARS = 3000

Source = bytes | str | Path


@dataclass(frozen=True)
class Block:
    kind: str  # "heading" | "paragraph" | "table"
    text: str  # a table's: a Markdown pipe table


@dataclass(frozen=True)
class Page:
    number: int  # 1-based
    blocks: tuple[Block, ...]
    method: str  # "text" (a text layer or a text format) | "ocr" | "empty" (nothing readable)

    @property
    def text(self) -> str:
        """The page's text, which chunk offsets point into."""
        return "\n\n".join(b.text for b in self.blocks)


class Document(Protocol):
    """An opened document: parsed once, read page by page."""

    page_count: int

    def page(self, number: int, *, ocr: bool, dpi: int, languages: str) -> Page: ...

    def close(self) -> None: ...


def page_count(data: bytes, media_type: str) -> int:
    document = open_document(data, media_type)
    try:
        return document.page_count
    finally:
        document.close()


def extract_page(
    data: bytes, media_type: str, number: int, *, ocr: bool = True, dpi: int = 200, languages: str = "eng"
) -> Page:
    """Page ``number`` (1-based) of ``data``; raises ``Refused("unreadable")`` if the file cannot be parsed."""
    document = open_document(data, media_type)
    try:
        return document.page(number, ocr=ocr, dpi=dpi, languages=languages)
    finally:
        document.close()


def open_document(source: Source, media_type: str) -> Document:
    """Parse ``source`` (bytes or a file path) once; ``Refused("unreadable")`` if it cannot be parsed."""
    from documents.formats import docx, html, image, pdf, text

    try:
        if media_type == PDF:
            return pdf.PdfDocument(source if isinstance(source, (str, Path)) else io.BytesIO(source))
        if media_type in (PNG, JPEG):
            return image.ImageDocument(_read(source))
        readers = {DOCX: docx.segments, HTML: html.segments, MARKDOWN: text.markdown_segments, TEXT: text.plain_segments}
        if media_type not in readers:
            raise Refused("unsupported_type", f"No reader for {media_type}.")
        return FlowDocument(paginate(readers[media_type](_read(source))))
    except Refused:
        raise
    except Exception as exc:  # each parser has its own error types; to the user they all mean the same
        raise Refused("unreadable", f"The file could not be parsed ({type(exc).__name__}).") from exc


class FlowDocument:
    """A document without pages of its own, already cut into pages."""

    def __init__(self, pages: list[tuple[Block, ...]]) -> None:
        self._pages = pages
        self.page_count = len(pages)

    def page(self, number: int, *, ocr: bool = True, dpi: int = 200, languages: str = "eng") -> Page:
        blocks = self._pages[page_index(number, self.page_count)]
        return Page(number, blocks, "text" if blocks else "empty")

    def close(self) -> None:
        pass


def paginate(segments: list[list[Block]], page_chars: int = PAGE_CHARS) -> list[tuple[Block, ...]]:
    """Pages from segments (the runs between explicit page breaks), each cut at block boundaries near ``page_chars``.

    A trailing empty segment (a break at the very end) makes no page; a document with no blocks is one empty page."""
    while len(segments) > 1 and not segments[-1]:
        segments = segments[:-1]
    pages: list[tuple[Block, ...]] = []
    for segment in segments:
        page: list[Block] = []
        size = 0
        for block in segment:
            if page and size + len(block.text) > page_chars:
                pages.append(tuple(page))
                page, size = [], 0
            page.append(block)
            size += len(block.text) + 2
        pages.append(tuple(page))
    return pages or [()]


def markdown_table(rows: list[list[str]]) -> str:
    """Rows (the first the header) as a Markdown pipe table; cells on one line, pipes escaped."""
    width = max(len(r) for r in rows)
    clean = [[" ".join((c or "").split()).replace("|", "\\|") for c in r] + [""] * (width - len(r)) for r in rows]
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return "\n".join([line(clean[0]), line(["---"] * width)] + [line(r) for r in clean[1:]])


def page_index(number: int, count: int) -> int:
    """The 0-based index of page ``number``; IndexError outside 1..count."""
    if not 1 <= number <= count:
        raise IndexError(f"page {number} of a document with {count} pages")
    return number - 1


def _read(source: Source) -> bytes:
    return Path(source).read_bytes() if isinstance(source, (str, Path)) else source
