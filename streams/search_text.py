"""Conversation search's words: the same on the way in (the search processor) and on the way out (a query).

A text's words are NFKC-normalised, casefolded, stopwords and single letters dropped; a word
with a digit in it is a code and kept whole ("q3", "v2.1"). Each word is indexed three ways,
each form named by a kind so that no two kinds ever meet under one key:

- ``w:<stem>``: the posting term (Snowball stem, as documents/terms.py: "reports" finds "reported");
- ``p:<prefix>`` for prefixes of 3 to ``PREFIX_MAX`` characters: a word still being typed;
- ``d:<word>`` and, for words of ``FUZZY_MIN`` characters or more, ``d:<word less one character>``:
  SymSpell's deletion variants. A query word meets an indexed word when one of its own
  ``d:`` forms equals one of the word's: one character inserted, deleted or replaced, or two
  neighbours swapped.

Prefix and deletion forms are not posted per message: they map to the word's posting term in a
per-user vocabulary (``search_variants``), written once per word, so a message costs a posting
per distinct term and the vocabulary grows with the words a user has used, not with the
messages. Every form is keyed by the owner's data key before it is stored or looked up
(streams/search_index.py); nothing here holds a key.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

from documents.terms import PARTS, TOKEN, stem, words
#: Shortest prefix looked up while typing, and the longest indexed (a longer one is looked up cut to it).
PREFIX_MIN = 3
PREFIX_MAX = 10
#: Words this long or longer are indexed under their one-deletion variants (shorter ones under themselves).
FUZZY_MIN = 5
#: A typed word shorter than this is matched exactly or as a prefix, never as a typo of another word.
FUZZY_QUERY_MIN = 4
#: At most this many words per query (the rest are ignored; a query is at most 200 characters).
QUERY_WORDS = 8


def term(word: str) -> str:
    """The posting form of ``word``: its stem, or a code whole."""
    return "w:" + stem(word)


def deletions(word: str) -> set[str]:
    """``word`` with one character left out, each way."""
    return {word[:i] + word[i + 1:] for i in range(len(word))}


def variants(word: str) -> set[str]:
    """The vocabulary forms of ``word``: its typing prefixes and its deletion forms."""
    out = {"p:" + word[:n] for n in range(PREFIX_MIN, min(len(word) - 1, PREFIX_MAX) + 1)}
    if len(word) >= FUZZY_QUERY_MIN:
        out.add("d:" + word)
    if len(word) >= FUZZY_MIN:
        out |= {"d:" + d for d in deletions(word)}
    return out


@dataclass(frozen=True)
class Indexed:
    """What one text (a message or a title) puts in the index, before keying."""

    tf: dict[str, int]  # posting term -> occurrences
    length: int  # words in the text (BM25's document length)
    vocabulary: dict[str, tuple[int, frozenset[str]]]  # posting term -> (its shortest word's length, variants)


def indexed(text: str) -> Indexed:
    found = words(text)
    vocabulary: dict[str, tuple[int, frozenset[str]]] = {}
    for word in set(found):
        t = term(word)
        chars, forms = vocabulary.get(t, (len(word), frozenset()))
        vocabulary[t] = (min(chars, len(word)), forms | variants(word))
    return Indexed(dict(Counter(term(w) for w in found)), len(found), vocabulary)


@dataclass(frozen=True)
class QueryWord:
    word: str
    term: str  # the exact posting term
    fuzzy: frozenset[str]  # ``d:`` forms to look up in the vocabulary (empty: too short for typos)
    prefix: str | None  # the ``p:`` form when this is the word being typed


def query(text: str) -> list[QueryWord]:
    """The words of a query; the last one is also a prefix when the text does not end in a space."""
    found = list(dict.fromkeys(words(text)))[:QUERY_WORDS]
    typing = bool(text) and not text[-1].isspace()
    out = []
    for i, word in enumerate(found):
        fuzzy = frozenset({"d:" + word} | ({"d:" + d for d in deletions(word)} if len(word) >= FUZZY_QUERY_MIN else set()))
        is_prefix = typing and i == len(found) - 1 and len(word) >= PREFIX_MIN
        out.append(QueryWord(word, term(word), fuzzy if len(word) >= FUZZY_QUERY_MIN else frozenset(),
                             "p:" + word[:PREFIX_MAX] if is_prefix else None))
    return out


def close(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are at most one edit apart (insert, delete, replace, or swap of neighbours)."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if len(a) == len(b):
        return a[i + 1:] == b[i + 1:] or (a[i + 2:] == b[i + 2:] and a[i:i + 2] == b[i:i + 2][::-1])
    return a[i + 1:] == b[i:] if len(a) > len(b) else a[i:] == b[i + 1:]


def matches(word: str, q: QueryWord) -> bool:
    """Whether ``word`` of a text is what ``q`` found (for the snippet): the same term, a completion of
    the word being typed, or a word one edit away."""
    if term(word) == q.term:
        return True
    if q.prefix is not None and word.startswith(q.word):
        return True
    return bool(q.fuzzy) and len(word) >= FUZZY_QUERY_MIN and close(word, q.word)


#: Characters of a snippet, about.
SNIPPET_CHARS = 160


def snippet(text: str, wanted: list[QueryWord], chars: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around its first word that a query word found (its start when none is),
    cut at spaces, with an ellipsis where it was cut."""
    flat = " ".join(unicodedata.normalize("NFKC", text).split())
    at = 0
    for match in TOKEN.finditer(flat):
        folded = match.group().casefold()
        parts = [folded] if any(c.isdigit() for c in folded) else PARTS.findall(folded)
        if any(matches(p, q) for p in parts for q in wanted):
            at = match.start()
            break
    start = max(0, at - chars // 3)
    if start > 0:
        space = flat.rfind(" ", 0, start + 1)
        start = space + 1 if space >= 0 and at - space <= chars // 2 else start
    end = min(len(flat), start + chars)
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > at else end
    return ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")
