"""DOCX: paragraphs and tables in document order (python-docx); headings by style; segments at explicit page breaks.

A page break is a ``<w:br w:type="page"/>`` in a run or a paragraph set to
start on a new page. Word's ``lastRenderedPageBreak`` marks (where Word last
laid out a page) are ignored: files written by other tools lack them, and
mixing both would make page numbers depend on the producing tool. Headers,
footers, footnotes and text boxes are not read.
"""

from __future__ import annotations

import io

from documents.extract import Block, markdown_table

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def segments(data: bytes) -> list[list[Block]]:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    out: list[list[Block]] = [[]]
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            rows = [[cell.text for cell in row.cells] for row in item.rows]
            if rows and any(any(c.strip() for c in r) for r in rows):
                out[-1].append(Block("table", markdown_table(rows)))
        elif isinstance(item, Paragraph):
            if item.paragraph_format.page_break_before and out[-1]:
                out.append([])
            kind = "heading" if _is_heading(item) else "paragraph"
            for i, piece in enumerate(_pieces(item._p)):
                if i:
                    out.append([])
                if piece.strip():
                    out[-1].append(Block(kind, piece.strip()))
    return out


def _is_heading(paragraph) -> bool:
    name = (paragraph.style.name if paragraph.style is not None else "").lower()
    return name.startswith("heading") or name == "title"


def _pieces(paragraph) -> list[str]:
    """The paragraph's text, split where a run holds a page break."""
    pieces = [""]
    for node in paragraph.iter(f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr"):
        if node.tag == f"{_W}t":
            pieces[-1] += node.text or ""
        elif node.tag == f"{_W}br" and node.get(f"{_W}type") == "page":
            pieces.append("")
        elif node.tag == f"{_W}tab":
            pieces[-1] += "\t"
        else:
            pieces[-1] += "\n"
    return pieces
