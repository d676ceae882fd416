"""PDF pages: pdfplumber's text with layout and ruled tables; pypdfium2 + tesseract for pages without a text layer.

Layout is read cheaply: pdfplumber's text lines in top-to-bottom order, a new
paragraph where the gap between lines exceeds about half a line or the font
size changes, a heading where a line's font is clearly larger than the page's
body text, or bold in a page that is not all bold. Multi-column pages come out
line by line across the columns (a known limit).
"""

from __future__ import annotations

import statistics
from typing import IO, Any

from documents.extract import Block, Page, markdown_table, page_index
from documents.formats.ocr import MAX_PIXELS
from documents.formats.ocr import read as read_image

#: A page whose text layer has fewer non-space characters than this is read by OCR as well.
MIN_TEXT_CHARS = 20
_HEADING_SIZE_RATIO = 1.15
_PARAGRAPH_GAP = 0.6  # of a line's height
_HEADING_MAX_CHARS = 200


class PdfDocument:
    def __init__(self, source: str | Any | IO[bytes]) -> None:
        import pdfplumber

        self._source = source
        self._plumber = pdfplumber.open(source)
        self._pdfium: Any = None
        self.page_count = len(self._plumber.pages)

    def page(self, number: int, *, ocr: bool = True, dpi: int = 200, languages: str = "eng") -> Page:
        plumber_page = self._plumber.pages[page_index(number, self.page_count)]
        try:
            blocks = _layout(plumber_page)
        finally:
            plumber_page.close()  # drops its cached characters: memory stays flat across pages
        found = sum(len("".join(b.text.split())) for b in blocks)
        if found >= MIN_TEXT_CHARS or not ocr:
            return Page(number, blocks, "text" if blocks else "empty")
        read = read_image(self._render(number, dpi), languages)
        if sum(len("".join(b.text.split())) for b in read) > found:
            return Page(number, read, "ocr")
        return Page(number, blocks, "text" if blocks else "empty")

    def close(self) -> None:
        self._plumber.close()
        if self._pdfium is not None:
            self._pdfium.close()

    def _render(self, number: int, dpi: int):
        import pypdfium2

        if self._pdfium is None:
            source = self._source
            if hasattr(source, "getvalue"):
                source = source.getvalue()
            self._pdfium = pypdfium2.PdfDocument(source)
        page = self._pdfium[number - 1]
        try:
            width, height = page.get_size()  # points
            scale = dpi / 72
            if width * height * scale * scale > MAX_PIXELS:  # a hostile MediaBox must not allocate gigabytes
                scale = (MAX_PIXELS / (width * height)) ** 0.5
            return page.render(scale=scale, grayscale=True).to_pil()
        finally:
            page.close()


def _layout(page: Any) -> tuple[Block, ...]:
    """Blocks of one pdfplumber page in reading order: ruled tables as tables, the rest as headings and paragraphs."""
    # The default table finder follows ruling lines; without any it finds nothing and costs most of a page's time.
    ruled = bool(page.lines or page.rects)
    tables = [t for t in page.find_tables() if _is_table(t)] if ruled else []
    placed: list[tuple[float, Block]] = []
    for table in tables:
        rows = [[cell or "" for cell in row] for row in table.extract()]
        placed.append((table.bbox[1], Block("table", markdown_table(rows))))
    boxes = [t.bbox for t in tables]
    text_page = page.filter(lambda obj: not any(_inside(obj, box) for box in boxes)) if boxes else page
    placed += _paragraphs(text_page.extract_text_lines(return_chars=True, strip=True))
    placed.sort(key=lambda item: item[0])
    return tuple(block for _, block in placed)


def _is_table(table: Any) -> bool:
    rows = table.extract()
    return len(rows) >= 2 and max(len(r) for r in rows) >= 2


def _inside(obj: dict, box: tuple[float, float, float, float]) -> bool:
    if "x0" not in obj:
        return False
    x = (obj["x0"] + obj["x1"]) / 2
    y = (obj["top"] + obj["bottom"]) / 2
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def _paragraphs(lines: list[dict]) -> list[tuple[float, Block]]:
    """(top, block) for runs of lines: split at wide gaps and font changes; headings by size or bold."""
    lines = [line for line in lines if line["text"].strip() and line["chars"]]
    if not lines:
        return []
    for line in lines:
        line["size"] = statistics.median(c["size"] for c in line["chars"])
        line["bold"] = all(_bold(c["fontname"]) for c in line["chars"] if c["text"].strip())
    body = statistics.median([line["size"] for line in lines for _ in range(len(line["text"]))])
    all_bold = all(line["bold"] for line in lines)
    for line in lines:
        line["heading"] = len(line["text"]) <= _HEADING_MAX_CHARS and (
            line["size"] >= body * _HEADING_SIZE_RATIO or (line["bold"] and not all_bold and len(line["text"]) <= 100)
        )
    out: list[tuple[float, Block]] = []
    run = [lines[0]]
    for previous, line in zip(lines, lines[1:]):
        height = previous["bottom"] - previous["top"]
        gap = line["top"] - previous["bottom"]
        if gap > _PARAGRAPH_GAP * height or line["heading"] != previous["heading"] or abs(line["size"] - previous["size"]) > 1:
            out.append(_block(run))
            run = []
        run.append(line)
    out.append(_block(run))
    return out


def _block(run: list[dict]) -> tuple[float, Block]:
    text = ""
    for line in run:
        piece = line["text"].strip()
        text = f"{text}{piece}" if text.endswith("-") or not text else f"{text} {piece}"
    return run[0]["top"], Block("heading" if run[0]["heading"] else "paragraph", text)


def _bold(fontname: str) -> bool:
    name = fontname.lower()
    return "bold" in name or "black" in name or "heavy" in name
