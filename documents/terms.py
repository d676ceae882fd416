"""Keyword terms: one function, the same when a chunk is indexed and when a question is asked.

Cassandra's SAI has no analyzer that tokenizes and stems, so Parley makes the
terms itself and stores them as postings (documents/index.py). Words are
NFKC-normalised and casefolded, English stopwords dropped and the rest Snowball-stemmed, so
"reports" finds "reported". Tokens with a digit in them ("Q3", "2024",
"ACME-7", "v2.1") are codes: kept whole and unstemmed, because exact codes,
numbers and names are what a keyword search is for.
"""

from __future__ import annotations

import re
import threading
import unicodedata

import Stemmer

#: A word, or a code: word characters joined by single '-', '.', '/' or '_' ("ACME-7", "3.5", "EU/2024").
TOKEN = re.compile(r"\w+(?:[-./]\w+)*")
#: A token's words: a hyphenated word ("cost-cutting") is its words.
PARTS = re.compile(r"[^\W_]+")
#: Longer tokens are hashes, base64 or URLs run together: noise that would bloat the postings.
MAX_TERM_CHARS = 40

#: English function words (a common list, kept here so the index does not change when a library's does).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)

# PyStemmer's stemmers are not thread-safe; the embedding and search threads each get their own.
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def terms(text: str) -> list[str]:
    """The keyword terms of ``text`` in order, repeats kept (BM25 counts them)."""
    return [stem(w) for w in words(text)]


def stem(word: str) -> str:
    """A word's Snowball stem; a code (a word with a digit) whole."""
    return word if any(c.isdigit() for c in word) else _stemmer().stemWord(word)


def words(text: str) -> list[str]:
    """The words of ``text`` that are terms, in order and unstemmed: codes whole, and each stemming candidate
    (stopwords and single letters out)."""
    out: list[str] = []
    # NFKC first: PDFs spell "fi" and "fl" as ligatures (U+FB01, U+FB02), and digits as full-width forms.
    for match in TOKEN.finditer(unicodedata.normalize("NFKC", text).casefold()):
        token = match.group()
        if len(token) > MAX_TERM_CHARS:
            continue
        if any(c.isdigit() for c in token):
            out.append(token)
            continue
        # Single letters: initials, "e.g.", list markers.
        out += [w for w in PARTS.findall(token) if len(w) > 1 and w not in STOPWORDS]
    return out
