"""What a file is, from its content: the gateway calls ``sniff`` on every upload.

The bytes decide; the file name and the declared (``Content-Type``) type may
only agree or stay silent. A name or declared type that names a *different*
supported type is a lie (PNG bytes sent as ``report.pdf``) and is refused as
``type_mismatch``; names and types we do not support (``.bin``,
``application/octet-stream``) say nothing and are ignored.

Two families are read the same way whatever they are called, so a claim only
refines the reading there: UTF-8 text (plain, Markdown, HTML: the name or the
declared type picks; with neither, HTML is recognised by its tags) and images
(PNG and JPEG both go to OCR; a JPEG saved as ``.png`` is common and harmless).
"""

from __future__ import annotations

import io
import re
import zipfile

from documents.errors import Refused

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
HTML = "text/html"
MARKDOWN = "text/markdown"
TEXT = "text/plain"
PNG = "image/png"
JPEG = "image/jpeg"

SUPPORTED: frozenset[str] = frozenset({PDF, DOCX, HTML, MARKDOWN, TEXT, PNG, JPEG})

_FAMILIES = ({HTML, MARKDOWN, TEXT}, {PNG, JPEG})

_BY_EXTENSION = {
    "pdf": PDF,
    "docx": DOCX,
    "html": HTML,
    "htm": HTML,
    "xhtml": HTML,
    "md": MARKDOWN,
    "markdown": MARKDOWN,
    "txt": TEXT,
    "text": TEXT,
    "png": PNG,
    "jpg": JPEG,
    "jpeg": JPEG,
}

#: Declared types that mean one of ours under another name.
_ALIASES = {
    "application/x-pdf": PDF,
    "application/xhtml+xml": HTML,
    "text/x-markdown": MARKDOWN,
    "image/jpg": JPEG,
    "image/pjpeg": JPEG,
}

#: The start of an HTML document or fragment, after whitespace and comments.
_HTML_START = re.compile(
    rb"\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body|title|meta|div|p|h[1-6]|table|article|section|main)[\s>/]",
    re.IGNORECASE | re.DOTALL,
)

_PDF_HEADER = re.compile(rb"%PDF-\d\.\d")

#: C0 controls other than tab, newline, carriage return and form feed: binary, not text.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def sniff(data: bytes, filename: str, declared: str | None = None) -> str:
    """The supported media type of ``data``; raises ``Refused`` (empty_file, unsupported_type, type_mismatch)."""
    if not data:
        raise Refused("empty_file", "The file is empty.")
    claims = [c for c in (_claim_of_name(filename), _claim_of_declared(declared)) if c]
    found = _content_type(data, claims)
    for claim in claims:
        if claim != found and not any(claim in f and found in f for f in _FAMILIES):
            raise Refused(
                "type_mismatch",
                f"The file is called or declared {_label(claim)}, but its content is {_label(found)}.",
            )
    return found


def _content_type(data: bytes, claims: list[str]) -> str:
    if _PDF_HEADER.search(data[:1024]):  # the header may follow a little junk, and readers accept that
        return PDF
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if data.startswith(b"\xff\xd8\xff"):
        return JPEG
    if data.startswith(b"PK\x03\x04"):
        if _is_docx(data):
            return DOCX
        raise Refused("unsupported_type", "The file is a zip archive but not a Word (DOCX) document.")
    if data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        raise Refused("unsupported_type", "Legacy Office files (.doc, .xls) are not supported; save it as DOCX or PDF.")
    text = _utf8(data)
    if text is None:
        raise Refused("unsupported_type", "The file is not PDF, DOCX, HTML, Markdown, text, PNG or JPEG.")
    if MARKDOWN in claims:
        return MARKDOWN
    if HTML in claims:
        return HTML
    if TEXT not in claims and _HTML_START.match(text):
        return HTML
    return TEXT


def _is_docx(data: bytes) -> bool:
    """A zip whose parts include the main document of a WordprocessingML package (reads the directory only)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            names = set(package.namelist())
    except (zipfile.BadZipFile, ValueError, OSError):
        return False
    return "[Content_Types].xml" in names and "word/document.xml" in names


def _utf8(data: bytes) -> bytes | None:
    """``data`` without a BOM if it is UTF-8 text, else None."""
    body = data.removeprefix(b"\xef\xbb\xbf")
    if _CONTROL.search(body):
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return body


def _claim_of_name(filename: str) -> str | None:
    _, dot, extension = filename.rpartition(".")
    return _BY_EXTENSION.get(extension.lower()) if dot else None


def _claim_of_declared(declared: str | None) -> str | None:
    if not declared:
        return None
    media_type = declared.split(";", 1)[0].strip().lower()
    media_type = _ALIASES.get(media_type, media_type)
    return media_type if media_type in SUPPORTED else None


def _label(media_type: str) -> str:
    return {PDF: "PDF", DOCX: "DOCX", HTML: "HTML", MARKDOWN: "Markdown", TEXT: "plain text", PNG: "PNG", JPEG: "JPEG"}[
        media_type
    ]
