"""Conversation search's ranking: postings in, conversations in order out. Pure: no key, no store.

BM25 (k1 1.2, b 0.75) per query word, summed. A word's postings come from the terms it reached:
its own term (exact), completions of the word being typed (prefix) and words one edit away
(fuzzy); a message's score for the word is the best of them, weighted by how it matched. A
word's idf counts the messages it reached by any term, so a typo's rare neighbour does not
outweigh the word itself. Statistics are the query's own: N is every message any query word
reached and avgdl their mean length (no per-user counter, which redelivery would make
inexact). Matches are ranked first by how well the words matched (exact or a completion
beats a typo; more words beat fewer), then by BM25, so an exact match is above every fuzzy one.
A title counts ``TITLE_BOOST`` times a message; a conversation is its best message plus its title.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

K1 = 1.2
B = 0.75
TITLE_BOOST = 2.0
#: How a word matched: its weight in BM25 and its quality (the first sort key).
EXACT, PREFIX, FUZZY = "exact", "prefix", "fuzzy"
WEIGHT = {EXACT: 1.0, PREFIX: 0.9, FUZZY: 0.5}
QUALITY = {EXACT: 2, PREFIX: 2, FUZZY: 1}


@dataclass(frozen=True)
class Posting:
    conversation_id: str
    message_id: str  # the conversation's own id: its title
    tf: int
    length: int  # words in the text


@dataclass(frozen=True)
class Hit:
    conversation_id: str
    message_id: str | None  # the best message; None when only the title matched
    score: float  # quality + bm25 / (bm25 + 1): ordered as the ranking is


#: For one query word: each term it reached, how (EXACT, PREFIX, FUZZY), and that term's postings.
Reached = Mapping[str, tuple[str, Sequence[Posting]]]


def rank(words: Sequence[Reached]) -> list[Hit]:
    """Every conversation the words reached, best first (ties by id, so the order is stable)."""
    lengths: dict[tuple[str, str], int] = {}
    for reached in words:
        for _, postings in reached.values():
            lengths.update(((p.conversation_id, p.message_id), p.length) for p in postings)
    if not lengths:
        return []
    n = len(lengths)
    avgdl = max(1.0, sum(lengths.values()) / n)
    quality: dict[tuple[str, str], int] = defaultdict(int)
    bm25: dict[tuple[str, str], float] = defaultdict(float)
    for reached in words:
        best: dict[tuple[str, str], tuple[int, float]] = {}
        for how, postings in reached.values():
            for p in postings:
                doc = (p.conversation_id, p.message_id)
                norm = p.tf * (K1 + 1) / (p.tf + K1 * (1 - B + B * p.length / avgdl))
                best[doc] = max(best.get(doc, (0, 0.0)), (QUALITY[how], WEIGHT[how] * norm))
        idf = math.log(1 + (n - len(best) + 0.5) / (len(best) + 0.5))
        for doc, (q, s) in best.items():
            quality[doc] += q
            bm25[doc] += idf * s
    by_conversation: dict[str, tuple[int, float, str | None]] = {}
    titles: dict[str, tuple[int, float]] = {}
    for (cid, mid), q in quality.items():
        if mid == cid:
            titles[cid] = (q, TITLE_BOOST * bm25[(cid, mid)])
        elif (q, bm25[(cid, mid)]) > by_conversation.get(cid, (0, 0.0, None))[:2]:
            by_conversation[cid] = (q, bm25[(cid, mid)], mid)
    hits = []
    for cid in by_conversation.keys() | titles.keys():
        q, s, mid = by_conversation.get(cid, (0, 0.0, None))
        tq, ts = titles.get(cid, (0, 0.0))
        total = s + ts
        hits.append(Hit(cid, mid, max(q, tq) + total / (total + 1)))
    return sorted(hits, key=lambda h: (-h.score, h.conversation_id))
