"""Chunks of a page, with provenance: document, page, ordinal, section and character offsets into ``Page.text``.

Section-aware: a heading starts a new chunk (it is the chunk's first line, so
it is searchable) and becomes the ``section`` of the chunks after it;
``chunk_page`` returns the section it ends in, so the next page continues it.
Paragraphs are packed whole up to the token budget; a paragraph over the budget
is split at sentence boundaries (at word boundaries inside an overlong
sentence), consecutive pieces repeating up to ``overlap_tokens`` of sentences.
A table is its own chunk (kind ``"table"``); one over the budget is split
between rows, and each piece after the first repeats the header rows in
``header`` (not part of its page span: index and prompt ``full_text``, cite
``text`` and the offsets).

Chunks never cross pages: pages are indexed as they are extracted
(progressive indexing), and a citation names one page. Deterministic: the same
page gives the same chunks, and ``chunk_id`` derives from document, page and
ordinal, so re-processing a page writes the same rows.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from documents.extract import Page
from parley.ids import NS

_TOKEN = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    document_id: str
    page: int  # 1-based
    ordinal: int  # 0-based position on the page
    section: str  # the heading this chunk falls under ("" before the first)
    kind: str  # "text" | "table"
    text: str  # == page.text[char_start:char_end]
    char_start: int
    char_end: int
    header: str = ""  # a continued table's header rows, repeated for a reader without the page; else ""

    @property
    def full_text(self) -> str:
        """What to embed, index and show the model: the text, after a continued table's header."""
        return f"{self.header}\n{self.text}" if self.header else self.text


def chunk_id(document_id: str, page: int, ordinal: int) -> str:
    return str(uuid.uuid5(NS, f"{document_id}:{page}:{ordinal}"))


def estimate_tokens(text: str) -> int:
    """Words and punctuation marks: close to a WordPiece count (all-MiniLM-L6-v2) for English prose."""
    return len(_TOKEN.findall(text))


def chunk_page(
    document_id: str,
    page: Page,
    *,
    section: str = "",
    budget_tokens: int = 200,
    overlap_tokens: int = 40,
    count_tokens: Callable[[str], int] = estimate_tokens,
) -> tuple[list[Chunk], str]:
    """The chunks of ``page`` and the section the page ends in (pass it to the next page's call)."""
    text = page.text
    spans: list[tuple[int, int, str, str, str]] = []  # (start, end, kind, section, header)
    open_: list[int] | None = None  # [start, end] of the text chunk being packed
    headings_only = False
    position = 0
    for block in page.blocks:
        start, end = position, position + len(block.text)
        position = end + 2
        if block.kind == "heading":
            if open_ is not None and headings_only:
                open_[1] = end  # consecutive headings stay together
            else:
                _close(spans, open_, section)
                open_ = [start, end]
            section, headings_only = block.text, True
        elif block.kind == "table":
            _close(spans, open_, section)
            open_ = None
            spans += [(s, e, "table", section, h) for s, e, h in _table_pieces(text, start, end, budget_tokens, count_tokens)]
        elif count_tokens(block.text) > budget_tokens:
            prefix = open_[0] if open_ is not None and headings_only else None
            if prefix is None:
                _close(spans, open_, section)
            pieces = _sentence_pieces(text, start, end, budget_tokens, overlap_tokens, count_tokens)
            if prefix is not None:
                pieces[0] = (prefix, pieces[0][1])
            spans += [(s, e, "text", section, "") for s, e in pieces[:-1]]
            open_, headings_only = list(pieces[-1]), False  # the last piece may take the next paragraphs
        elif open_ is not None and count_tokens(text[open_[0] : end]) <= budget_tokens:
            open_[1] = end
            headings_only = False
        else:
            _close(spans, open_, section)
            open_, headings_only = [start, end], False
    _close(spans, open_, section)
    chunks = [
        Chunk(chunk_id(document_id, page.number, i), document_id, page.number, i, sec, kind, text[s:e], s, e, header)
        for i, (s, e, kind, sec, header) in enumerate(spans)
    ]
    return chunks, section


def _close(spans: list, open_: list[int] | None, section: str) -> None:
    if open_ is not None:
        spans.append((open_[0], open_[1], "text", section, ""))


def _sentence_pieces(
    text: str, start: int, end: int, budget: int, overlap: int, count: Callable[[str], int]
) -> list[tuple[int, int]]:
    """Spans of ``text[start:end]`` of at most ``budget`` tokens, cut between sentences, overlapping by whole sentences."""
    units: list[tuple[int, int]] = []
    cursor = start
    for match in _SENTENCE_END.finditer(text, start, end):
        units.append((cursor, match.start() + len(match.group().rstrip())))
        cursor = match.end()
    if cursor < end:
        units.append((cursor, end))
    units = [w for s, e in units for w in ([(s, e)] if count(text[s:e]) <= budget else _word_units(text, s, e, budget, count))]
    pieces = []
    i = 0
    while i < len(units):
        j = i + 1
        while j < len(units) and count(text[units[i][0] : units[j][1]]) <= budget:
            j += 1
        pieces.append((units[i][0], units[j - 1][1]))
        if j == len(units):
            break
        k = j
        while k - 1 > i and count(text[units[k - 1][0] : units[j - 1][1]]) <= overlap:
            k -= 1
        i = k
    return pieces


def _word_units(text: str, start: int, end: int, budget: int, count: Callable[[str], int]) -> list[tuple[int, int]]:
    """An overlong sentence cut at word boundaries into runs of at most ``budget`` tokens (a lone huge word whole)."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(text, start, end)]
    out: list[tuple[int, int]] = []
    first = 0
    for i in range(1, len(words) + 1):
        if i == len(words) or count(text[words[first][0] : words[i][1]]) > budget:
            out.append((words[first][0], words[i - 1][1]))
            first = i
    return out


def _table_pieces(
    text: str, start: int, end: int, budget: int, count: Callable[[str], int]
) -> list[tuple[int, int, str]]:
    """(start, end, header) of a table's chunks: whole if it fits, else runs of rows, the header repeated after the first."""
    if count(text[start:end]) <= budget:
        return [(start, end, "")]
    lines, cursor = [], start
    for line in text[start:end].split("\n"):
        lines.append((cursor, cursor + len(line)))
        cursor += len(line) + 1
    header = text[lines[0][0] : lines[min(1, len(lines) - 1)][1]]
    rows = lines[2:]
    if not rows:
        return [(start, end, "")]
    pieces: list[tuple[int, int, str]] = []
    piece_start = start
    for i in range(1, len(rows) + 1):
        repeated = "" if not pieces else header
        over = i < len(rows) and count(repeated + text[piece_start : rows[i][1]]) > budget
        if i == len(rows) or over:
            pieces.append((piece_start, rows[i - 1][1], repeated))
            if i < len(rows):
                piece_start = rows[i][0]
    return pieces
