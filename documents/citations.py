"""What a reply drew on: the passages it cites, each with the span of page text it used.

Pure. Two kinds of evidence, checked against the passages the prompt showed
(``Retrieval.passages``), never against anything else:

* a label the model wrote (``[report.pdf p.3]``, or ``[p.3]`` when one document
  has that page): the passage it names, quoting the passage sentence closest
  to the reply sentence that carries the label;
* the reply's own words: a reply sentence that shares a run of content terms
  with a passage sentence (``MIN_SHARED`` distinct terms, most of the shorter
  side's) is attributed to it, quoting that sentence.

Small models rarely write labels; the lexical check is what makes their
citations real rather than decorative. A passage is cited once, numbered in
the order the reply first used it. A reply that used no passage although the
turn had documents is ``uncited``: the metadata says so instead of showing
nothing (no silent loss).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from documents.terms import terms
from schemas import events as ev

#: Least distinct content terms a reply sentence and a passage sentence must share.
MIN_SHARED = 3
#: ... and the share of the shorter sentence's terms they must make up.
MIN_SHARE = 0.5
QUOTE_MAX_CHARS = 300

#: A sentence ends at . ! or ? followed by white space (so "4.2" and "p.3" stay whole), or at a line break.
_SENTENCE = re.compile(r"\S(?:.*?)(?:[.!?](?=\s)|(?=\n)|$)", re.S)
_LABEL = re.compile(r"\[([^\[\]]{0,120}?)\s*p\.?\s*(\d{1,5})\]", re.IGNORECASE)


@dataclass(frozen=True)
class _Sentence:
    text: str
    start: int  # in its source
    terms: frozenset[str]


def sentences(text: str) -> list[_Sentence]:
    out = []
    for m in _SENTENCE.finditer(text):
        stripped = m.group(0).strip()
        if stripped:
            out.append(_Sentence(stripped, m.start(), frozenset(terms(stripped))))
    return out


def _shares(a: frozenset[str], b: frozenset[str]) -> bool:
    shared = len(a & b)
    return shared >= MIN_SHARED and shared >= MIN_SHARE * min(len(a), len(b))


def _quote(sentence: _Sentence) -> str:
    return sentence.text[:QUOTE_MAX_CHARS]


def _labelled(reply: str, passages: Sequence[ev.Passage]) -> list[tuple[int, ev.Passage, str]]:
    """(position in the reply, passage, quote) for each label the reply wrote that names a shown passage."""
    out = []
    reply_sentences = sentences(reply)
    for m in _LABEL.finditer(reply):
        name, page = m.group(1).strip().lower(), int(m.group(2))
        named = [p for p in passages if p.page == page and (not name or name in (p.filename.lower(), p.label.lower()))]
        if not named:
            continue
        around = next((s for s in reply_sentences if s.start <= m.start() < s.start + len(s.text) + 1), None)
        best, best_overlap = named[0], -1
        quote = ""
        for p in named:
            for s in sentences(p.text):
                overlap = len(s.terms & around.terms) if around else 0
                if overlap > best_overlap:
                    best, best_overlap, quote = p, overlap, _quote(s)
        out.append((m.start(), best, quote or best.text[:QUOTE_MAX_CHARS]))
    return out


def _lexical(reply: str, passages: Sequence[ev.Passage]) -> list[tuple[int, ev.Passage, str]]:
    out = []
    candidates = [(p, sentences(p.text)) for p in passages]
    for rs in sentences(reply):
        if len(rs.terms) < MIN_SHARED:
            continue
        best: tuple[int, ev.Passage, _Sentence] | None = None
        for p, ps in candidates:
            for s in ps:
                if _shares(rs.terms, s.terms):
                    shared = len(rs.terms & s.terms)
                    if best is None or shared > best[0]:
                        best = (shared, p, s)
        if best is not None:
            out.append((rs.start, best[1], _quote(best[2])))
    return out


def cite(reply: str, retrieval: ev.Retrieval | None) -> tuple[list[ev.Citation], str]:
    """The reply's citations and its citation status ('' when the turn had no documents)."""
    if retrieval is None:
        return [], ""
    found = sorted(_labelled(reply, retrieval.passages) + _lexical(reply, retrieval.passages), key=lambda t: t[0])
    citations: list[ev.Citation] = []
    seen: set[str] = set()
    for _, passage, quote in found:
        if passage.chunk_id in seen:
            continue
        seen.add(passage.chunk_id)
        citations.append(
            ev.Citation(
                number=len(citations) + 1,
                document_id=passage.document_id,
                page=passage.page,
                chunk_id=passage.chunk_id,
                text=quote,
                filename=passage.filename,
            )
        )
    return citations, "cited" if citations else "uncited"
