"""Containers a raw byte search cannot see into: zip (docx, xlsx, odt…), gzip, and a PDF's Flate streams.

Uploaded documents are kept as they came (``documents.blobs``): a .docx is a zip of deflated XML, a
PDF's page text sits in deflated content streams. Each container is opened into parts, every part a
stream of decompressed chunks. PDF text is found only where the PDF writes it as plain strings
(``(text) Tj``, as reportlab and most generators do with standard fonts); text drawn through a
subset font's glyph ids is not, and no byte search could find it.
"""

from __future__ import annotations

import gzip
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

Part = tuple[str, Iterator[bytes]]  # (where, decompressed chunks)

_CHUNK = 1 << 20
_STREAM = re.compile(rb"stream\r?\n")
#: A PDF is searched in memory (its streams are found by their keywords); bigger ones are reported.
MAX_PDF_BYTES = 256 << 20


class Unreadable(ValueError):
    """A container that cannot be opened (encrypted, truncated); the message says why."""


def kind(head: bytes) -> str | None:
    """"zip", "gzip" or "pdf" from a file's first bytes; None for anything else."""
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"%PDF-"):
        return "pdf"
    return None


def parts(path: Path, what: str) -> Iterator[Part]:
    if what == "zip":
        yield from _zip(path)
    elif what == "gzip":
        yield "decompressed", _gzip(path)
    else:
        yield from _pdf(path)


def _zip(path: Path) -> Iterator[Part]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise Unreadable(f"zip: {exc}") from exc
    with archive:
        for info in archive.infolist():
            if info.flag_bits & 0x1:
                raise Unreadable(f"zip member {info.filename} is encrypted")
            yield f"member {info.filename}", _member(archive, info)


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    try:
        with archive.open(info) as f:
            while chunk := f.read(_CHUNK):
                yield chunk
    except (zipfile.BadZipFile, NotImplementedError, zlib.error, EOFError) as exc:
        raise Unreadable(f"zip member {info.filename}: {exc}") from exc


def _gzip(path: Path) -> Iterator[bytes]:
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                yield chunk
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise Unreadable(f"gzip: {exc}") from exc


def _pdf(path: Path) -> Iterator[Part]:
    if path.stat().st_size > MAX_PDF_BYTES:
        raise Unreadable(f"PDF over {MAX_PDF_BYTES >> 20} MiB: its streams are not decompressed")
    data = path.read_bytes()
    for m in _STREAM.finditer(data):
        end = data.find(b"endstream", m.end())
        if end < 0:
            break
        inflate = zlib.decompressobj()
        try:
            text = inflate.decompress(data[m.end() : end])
        except zlib.error:
            continue  # not Flate (an image's DCT, say): its raw bytes were searched with the file
        yield f"stream at {m.start()}", iter((text,))
