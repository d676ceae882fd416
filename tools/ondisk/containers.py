"""Containers a raw byte search cannot see into: zip (docx, xlsx, odt…), gzip, and a PDF's Flate streams.

Uploaded documents are kept as they came (``documents.blobs``): a .docx is a zip of deflated XML, a
PDF's page text sits in deflated content streams. Each container is opened into parts, every part a
stream of decompressed chunks. PDF text is found only where the PDF writes it as plain strings
(``(text) Tj``, as reportlab and most generators do with standard fonts); text drawn through a
subset font's glyph ids is not, and no byte search could find it.
"""

from __future__ import annotations

import base64
import gzip
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

Part = tuple[str, Iterator[bytes]]  # (where, decompressed chunks)

_CHUNK = 1 << 20
_STREAM = re.compile(rb"(?<!end)stream\r?\n")
#: A PDF is searched in memory (its streams are found by their keywords); bigger ones are reported.
MAX_PDF_BYTES = 256 << 20
#: A zip member or gzip file is searched up to this many decompressed bytes (a zip bomb is an upload
#: like any other: documents/safety.py refuses it, but its blob may stay); the rest is reported.
MAX_EXPANDED_BYTES = 1 << 30


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
            yield from _capped(f, f"zip member {info.filename}")
    except (zipfile.BadZipFile, NotImplementedError, zlib.error, EOFError) as exc:
        raise Unreadable(f"zip member {info.filename}: {exc}") from exc


def _gzip(path: Path) -> Iterator[bytes]:
    try:
        with gzip.open(path, "rb") as f:
            yield from _capped(f, "gzip")
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise Unreadable(f"gzip: {exc}") from exc


def _capped(f: IO[bytes], what: str) -> Iterator[bytes]:
    total = 0
    while chunk := f.read(_CHUNK):
        yield chunk
        total += len(chunk)
        if total >= MAX_EXPANDED_BYTES:
            raise Unreadable(f"{what} expands past {MAX_EXPANDED_BYTES >> 20} MiB: the rest is not searched")


def _pdf(path: Path) -> Iterator[Part]:
    if path.stat().st_size > MAX_PDF_BYTES:
        raise Unreadable(f"PDF over {MAX_PDF_BYTES >> 20} MiB: its streams are not decompressed")
    data = path.read_bytes()
    for m in _STREAM.finditer(data):
        end = data.find(b"endstream", m.end())
        if end < 0:
            break
        # The stream's dictionary ends right before the keyword; its /Filter names the decoding chain.
        head = data[data.rfind(b"obj", 0, m.start()) : m.start()]
        chain = _FILTER.search(head)
        names = re.findall(rb"/(\w+)", chain.group(1)) if chain else []
        text = _decoded(data[m.end() : end], names)
        if text is not None:
            yield f"stream at {m.start()}", iter((text,))


def _decoded(stream: bytes, filters: list[bytes]) -> bytes | None:
    """The stream through its filters; None where one is not a text filter (an image's DCTDecode) or fails:
    its bytes were searched raw with the file."""
    if not filters:
        return None  # unfiltered: the raw search saw it as it is
    for name in filters:
        decode = _FILTERS.get(name)
        if decode is None:
            return None
        try:
            stream = decode(stream)
        except (ValueError, zlib.error):
            return None
    return stream


def _inflate(data: bytes) -> bytes:
    return zlib.decompressobj().decompress(data)  # a decompressobj tolerates the EOL before endstream


def _ascii85(data: bytes) -> bytes:
    return base64.a85decode(data.strip().removesuffix(b"~>"))


def _hex(data: bytes) -> bytes:
    return bytes.fromhex(data.strip().removesuffix(b">").decode("ascii", errors="replace"))


_FILTER = re.compile(rb"/Filter\s*(\[[^\]]*\]|/\w+)")
#: PDF filter (full and abbreviated names) → decoder: the text filters; the others encode images.
_FILTERS: dict[bytes, Callable[[bytes], bytes]] = {
    b"FlateDecode": _inflate, b"Fl": _inflate, b"ASCII85Decode": _ascii85, b"A85": _ascii85, b"ASCIIHexDecode": _hex, b"AHx": _hex,
}
