"""Markdown and plain text: blocks from blank-line-separated paragraphs; a form feed is a page break.

Markdown adds ATX (``# Title``) and setext (underlined) headings, pipe tables
(re-rendered in the canonical form ``extract.markdown_table`` writes) and
fenced code blocks kept whole. Other Markdown stays as written: the model reads
Markdown well, and offsets stay simple.
"""

from __future__ import annotations

import re

from documents.extract import Block, markdown_table

_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def plain_segments(data: bytes) -> list[list[Block]]:
    return [
        [Block("paragraph", p.strip()) for p in re.split(r"\n\s*\n", page) if p.strip()]
        for page in _decode(data).split("\f")
    ]


def markdown_segments(data: bytes) -> list[list[Block]]:
    return [_markdown_blocks(page.split("\n")) for page in _decode(data).split("\f")]


def _markdown_blocks(lines: list[str]) -> list[Block]:
    blocks: list[Block] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append(Block("paragraph", "\n".join(paragraph).strip()))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence.group(1))), len(lines) - 1)
            blocks.append(Block("paragraph", "\n".join(lines[i : end + 1]).strip()))
            i = end + 1
            continue
        heading = _ATX.match(line)
        if heading:
            flush()
            if heading.group(2):
                blocks.append(Block("heading", heading.group(2)))
        elif _SETEXT.match(line) and len(paragraph) == 1:
            blocks.append(Block("heading", paragraph.pop().strip()))
        elif _SETEXT.match(line) and not paragraph:
            pass  # a thematic break
        elif "|" in line and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]) and "|" in lines[i + 1]:
            flush()
            rows = [_cells(line)]
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append(_cells(lines[i]))
                i += 1
            blocks.append(Block("table", markdown_table(rows)))
            continue
        elif not line.strip():
            flush()
        else:
            paragraph.append(line.rstrip())
        i += 1
    flush()
    return blocks


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _decode(data: bytes) -> str:
    return data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
