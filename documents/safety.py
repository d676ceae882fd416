"""Is an uploaded file safe to parse? ``check`` raises ``Refused`` when it is not.

Runs in the document worker before any extraction, on a file ``sniff`` already
typed. In order: the virus scanner (ClamAV's ``clamscan`` with the configured
signature directory), then per type:

- DOCX: the zip directory's declared sizes (total, and each member's expansion
  ratio) against the bomb limits, then macros (a ``vbaProject.bin`` part, a
  macro-enabled content type, or VBA that oletools finds in any member; a
  package oletools cannot read is refused, not taken for macro-free).
  Declared sizes suffice because Python's zipfile never inflates a member past
  its declared size (python-docx reads through it).
- PDF: every indirect object pypdf can reach, object streams included, is
  walked for active content (JavaScript, launch and import actions, embedded
  files, rich media, XFA forms, additional actions). pypdf decodes names, so
  ``/J#61vaScript`` is ``/JavaScript`` here. Then the page count. Then the
  bombs, with the extractor's own parser: pdfminer (what pdfplumber reads
  with) decodes every stream through its whole filter chain (Flate, LZW,
  ASCII85/Hex, RunLength, predictors), exactly as extraction will, and a
  stream or the sum of them past the limit is refused. The decoding is bounded
  by the child's address space (``PARLEY_DOCUMENTS_CHILD_MEMORY_MB``): one too
  large to decode at all is a bomb as well. Image codecs (DCT, JPX, JBIG2) are
  decoded by pdfium only when a page is rendered for OCR; their declared
  pixel count is checked here.
- Images: the pixel count against the bomb limit (before anything decodes them).
- DOCX, HTML, Markdown and text: the page count (``extract.page_count``).

Bounded on hostile input: the scanner has a timeout and the PDF walks give up
at a deadline. The parsers themselves (pypdf, pdfminer, python-docx) are not
interruptible, so the worker runs ``check`` in the sandboxed extraction child
(``PageReader.check``), where a timeout or the document's budget kills the
process and the address-space cap bounds every decoding.
"""

from __future__ import annotations

import io
import re
import subprocess
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from documents.errors import Refused
from documents.settings import DocumentSettings
from documents.sniff import DOCX, JPEG, PDF, PNG

#: A zip member may expand this much before its ratio counts: tiny XML parts compress extremely well.
_RATIO_FLOOR_BYTES = 1 << 20
_MAX_ZIP_MEMBERS = 10_000

#: Dictionary keys that make a PDF do something when opened, rather than show something.
_ACTIVE_KEYS = frozenset({"/JavaScript", "/JS", "/Launch", "/EmbeddedFile", "/EmbeddedFiles", "/RichMedia", "/XFA"})
_ACTIVE_ACTIONS = frozenset({"/JavaScript", "/Launch", "/ImportData", "/GoToE", "/RichMediaExecute", "/Rendition"})

_FOUND = re.compile(rb"^stdin: (.+) FOUND$", re.MULTILINE)


@dataclass(frozen=True)
class Limits:
    max_pages: int
    max_uncompressed_bytes: int
    max_compression_ratio: float
    clamscan: str  # the scanner's executable; "" means no scanner is configured
    clamav_db: str  # its signature directory (or file)
    scan_timeout_s: float

    @classmethod
    def from_settings(cls, s: DocumentSettings) -> Limits:
        return cls(
            max_pages=s.max_pages,
            max_uncompressed_bytes=s.max_uncompressed_bytes,
            max_compression_ratio=s.max_compression_ratio,
            clamscan=s.clamscan,
            clamav_db=s.clamav_db,
            scan_timeout_s=s.scan_timeout_s,
        )


def check(data: bytes, media_type: str, limits: Limits) -> None:
    """Raise ``Refused`` if ``data`` (already sniffed as ``media_type``) must not be parsed; return if it is safe."""
    scan(data, limits)
    if media_type == PDF:
        _check_pdf(data, limits)
    elif media_type == DOCX:
        _check_docx(data, limits)
    elif media_type in (PNG, JPEG):
        _check_image(data, limits)
    if media_type not in (PDF, PNG, JPEG):
        from documents.extract import page_count

        _check_pages(page_count(data, media_type), limits)


#: The databases freshclam keeps (``.cvd`` as downloaded, ``.cld`` once patched): without both, a scanner
#: knows next to nothing (the shipped test signatures know EICAR).
CLAMAV_DATABASES = ("main", "daily")


def missing_signatures(clamav_db: str) -> list[str]:
    """Which of ClamAV's own databases ``clamav_db`` lacks (empty: a real scanner's signatures are there)."""
    folder = Path(clamav_db)
    return [db for db in CLAMAV_DATABASES if not any((folder / f"{db}{ext}").is_file() for ext in (".cvd", ".cld"))]


def scan(data: bytes, limits: Limits) -> None:
    """Run the virus scanner over ``data`` (on stdin): malware_detected, or scan_failed if it could not say."""
    if not limits.clamscan:
        return
    command = [limits.clamscan, "--no-summary", "--stdout", "-d", limits.clamav_db, "-"]
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=limits.scan_timeout_s)
    except FileNotFoundError:
        raise Refused("scan_failed", f"The virus scanner {limits.clamscan!r} is not installed (PARLEY_DOCUMENTS_CLAMSCAN).")
    except subprocess.TimeoutExpired:
        raise Refused("scan_failed", f"The virus scan took over {limits.scan_timeout_s:g} s (PARLEY_DOCUMENTS_SCAN_TIMEOUT_S).")
    if done.returncode == 1:
        found = _FOUND.search(done.stdout)
        name = found.group(1).decode(errors="replace") if found else "unknown signature"
        raise Refused("malware_detected", f"The virus scanner found {name} in the file.")
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise Refused(
            "scan_failed",
            f"The virus scanner failed (exit {done.returncode}: {reason[0] if reason else 'no message'}); "
            f"check PARLEY_DOCUMENTS_CLAMAV_DB={limits.clamav_db!r}.",
        )


# ---------------------------------------------------------------- DOCX


def _check_docx(data: bytes, limits: Limits) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            members = package.infolist()
            types = _read_small(package, "[Content_Types].xml")
    except (zipfile.BadZipFile, ValueError, OSError, KeyError) as exc:
        raise Refused("unreadable", f"The DOCX package is damaged ({type(exc).__name__}).")
    if len(members) > _MAX_ZIP_MEMBERS:
        raise Refused("decompression_bomb", f"The DOCX package has {len(members)} parts.")
    expanded = sum(m.file_size for m in members)
    if expanded > limits.max_uncompressed_bytes:
        raise Refused("decompression_bomb", f"The DOCX package expands to {expanded:,} bytes.")
    for m in members:
        ratio = m.file_size / max(m.compress_size, 1)
        if m.file_size > _RATIO_FLOOR_BYTES and ratio > limits.max_compression_ratio:
            raise Refused("decompression_bomb", f"A part of the DOCX package expands {ratio:,.0f} times.")
    if any(m.filename.lower().endswith("vbaproject.bin") for m in members) or b"macroEnabled" in types:
        raise Refused("macros", "The document carries macros (a VBA project).")
    if _olevba_finds_macros(data):
        raise Refused("macros", "The document carries macros (VBA in an embedded part).")


def _read_small(package: zipfile.ZipFile, name: str) -> bytes:
    info = package.getinfo(name)
    if info.file_size > _RATIO_FLOOR_BYTES:
        raise ValueError(f"{name} is implausibly large")
    return package.read(info)


def _olevba_finds_macros(data: bytes) -> bool:
    """VBA anywhere oletools looks: OLE parts inside the package, embedded documents."""
    with warnings.catch_warnings():  # oletools still calls pyparsing's deprecated names
        warnings.simplefilter("ignore", DeprecationWarning)
        from oletools.olevba import VBA_Parser

    try:
        parser = VBA_Parser("upload.docx", data=data)
    except Exception as exc:  # the zip checks passed, so a package oletools cannot read is not one we trust
        raise Refused("unreadable", f"The macro scanner could not read the document ({type(exc).__name__}).")
    try:
        return bool(parser.detect_vba_macros())
    except Exception as exc:  # failing closed: "could not look" is not "no macros"
        raise Refused("unreadable", f"The macro scanner could not read the document ({type(exc).__name__}).")
    finally:
        parser.close()


# ---------------------------------------------------------------- PDF


def _check_pdf(data: bytes, limits: Limits) -> None:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    deadline = time.monotonic() + limits.scan_timeout_s
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise Refused("unreadable", "The PDF is password-protected.")
        active: str | None = _active_in(reader.trailer) or None
        for number, obj in _indirect_objects(reader):
            if time.monotonic() > deadline:
                raise Refused("unreadable", f"The PDF took over {limits.scan_timeout_s:g} s to check.")
            active = active or _active_in(obj)
        pages = len(reader.pages)
    except Refused:
        raise
    except LimitReachedError:
        raise Refused("decompression_bomb", "A stream of the PDF expands beyond pypdf's limits.")
    except RecursionError:
        raise Refused("unreadable", "The PDF's objects nest too deeply.")
    except Exception as exc:  # pypdf raises many types on damaged files; all mean the same to the user
        raise Refused("unreadable", f"The PDF could not be parsed ({type(exc).__name__}).")
    if active:
        raise Refused("active_content", f"The PDF carries active content ({active}).")
    _check_pages(pages, limits)
    _check_streams(data, limits, deadline)


def _indirect_objects(reader: Any):
    """Every object the cross-reference sections name (classic tables, xref streams, object streams)."""
    from pypdf.generic import IndirectObject

    numbers = {(num, gen) for gen, table in reader.xref.items() for num in table}
    numbers |= {(num, 0) for num in reader.xref_objStm}
    for num, gen in sorted(numbers):
        obj = reader.get_object(IndirectObject(num, gen, reader))
        if obj is not None:
            yield num, obj


def _active_in(obj: Any, depth: int = 0) -> str:
    """The first active-content marker in ``obj`` or its direct children (indirect ones are walked on their own)."""
    from pypdf.generic import ArrayObject, DictionaryObject

    if depth > 64:
        return ""
    if isinstance(obj, DictionaryObject):
        for key, value in obj.items():
            if key in _ACTIVE_KEYS:
                return key
            if key == "/AA" and _non_empty(value):
                return "/AA"
            if key == "/S" and isinstance(value, str) and value in _ACTIVE_ACTIONS:
                return f"/S {value}"
            if key in ("/Type", "/Subtype") and value in ("/EmbeddedFile", "/RichMedia"):
                return f"{key} {value}"
            if key == "/EF" and _non_empty(value):
                return "/EF"
            found = _active_in(value, depth + 1)
            if found:
                return found
    elif isinstance(obj, ArrayObject):
        for value in obj:
            found = _active_in(value, depth + 1)
            if found:
                return found
    return ""


def _non_empty(value: Any) -> bool:
    value = value.get_object() if hasattr(value, "get_object") else value
    return bool(value)


def _number(value: Any) -> int:
    from pdfminer.pdftypes import resolve1

    value = resolve1(value)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _check_streams(data: bytes, limits: Limits, deadline: float) -> None:
    """Decode every stream as the extractor will, with its own parser (pdfminer, under pdfplumber) and its own
    decoders, whole filter chains included: one stream, or all but images together, past the limit is a bomb.

    Decoding is bounded by the child's address space: a stream too large to decode at all is a bomb too."""
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfparser import PDFParser
    from pdfminer.pdftypes import PDFStream
    from pdfminer.psparser import LIT

    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)))
        numbers = sorted({n for xref in document.xrefs for n in xref.get_objids()})
    except Exception as exc:  # pdfminer's own errors: the extractor could not open it either
        raise Refused("unreadable", f"The PDF could not be parsed ({type(exc).__name__}).")
    total = 0
    for number in numbers:
        if time.monotonic() > deadline:
            raise Refused("unreadable", f"The PDF took over {limits.scan_timeout_s:g} s to check.")
        try:
            stream = document.getobj(number)
            if not isinstance(stream, PDFStream):
                continue
            image = stream.get("Subtype") is LIT("Image")
            if image:
                pixels = _number(stream.get("Width")) * _number(stream.get("Height"))
                if pixels * 3 > limits.max_uncompressed_bytes:
                    raise Refused("decompression_bomb", f"An image of the PDF has {pixels:,} pixels.")
            size = len(stream.get_data())
            stream.data = None  # decoded once to be measured, not kept: the next stream needs the room
        except Refused:
            raise
        except MemoryError:
            raise Refused("decompression_bomb", "A stream of the PDF expands beyond the reader's memory.")
        except Exception:  # a damaged object is the extractor's problem (it skips it too), not a bomb
            continue
        if size > limits.max_uncompressed_bytes:
            raise Refused("decompression_bomb", "A stream of the PDF expands beyond the limit.")
        if not image:
            total += size
            if total > limits.max_uncompressed_bytes:
                raise Refused("decompression_bomb", f"The PDF's streams expand to over {total:,} bytes.")


# ---------------------------------------------------------------- images and pages


def _check_image(data: bytes, limits: Limits) -> None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            image.verify()
    except Image.DecompressionBombError:
        raise Refused("decompression_bomb", "The image has too many pixels.")
    except Exception as exc:  # Pillow raises many types on damaged images
        raise Refused("unreadable", f"The image could not be read ({type(exc).__name__}).")
    if width * height * 3 > limits.max_uncompressed_bytes:
        raise Refused("decompression_bomb", f"The image has {width * height:,} pixels.")


def _check_pages(pages: int, limits: Limits) -> None:
    if pages > limits.max_pages:
        raise Refused(
            "too_many_pages", f"The document has {pages} pages; at most {limits.max_pages} are accepted."
        )
