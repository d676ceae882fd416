"""What the document index takes and answers, as plain data: cores name these without loading Cassandra's driver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ChunkLike(Protocol):
    """What the index reads of a chunk (documents.chunking.Chunk has these and more)."""

    chunk_id: str  # a uuid string, deterministic: uuid5(document_id:page:ordinal)
    page: int
    ordinal: int
    section: str
    kind: str
    text: str
    char_start: int
    char_end: int


@dataclass(frozen=True)
class Scope:
    """One document a search may read, up to ``max_page`` (pages past it are not ready and never served)."""

    document_id: str
    max_page: int
    filename: str = ""  # carried onto the hits, for the prompt's [doc p.N] labels
    user_id: str = ""  # the owner, whose data key seals the text and keys the terms


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    document_id: str
    page: int
    ordinal: int
    text: str
    section: str
    char_start: int
    score: float  # the search's own: BM25, cosine similarity (Cassandra's, in [0, 1]), or a fused score
    filename: str = ""


@dataclass(frozen=True)
class PageRow:
    number: int
    text: str
    method: str  # text | ocr | empty
