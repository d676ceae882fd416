"""Why Parley will not index a file: one exception, one machine-readable code per reason.

The gateway refuses at upload what it can tell cheaply (``empty_file``,
``too_large``, ``unsupported_type``, ``type_mismatch``); the document worker
refuses the rest and records the code in ``DocumentFailed``.
"""

from __future__ import annotations

#: Every code a ``Refused`` carries, and what it means to the user.
CODES = {
    "empty_file": "the file has no bytes",
    "too_large": "the file is larger than the upload limit",
    "unsupported_type": "the content is not PDF, DOCX, HTML, Markdown, plain text, PNG or JPEG",
    "type_mismatch": "the file's name or declared type says one format, its content another",
    "malware_detected": "the virus scanner matched a signature",
    "active_content": "the file carries scripts, launch actions, embedded files or similar",
    "macros": "the Office document carries macros",
    "decompression_bomb": "the file expands to far more than its size",
    "too_many_pages": "the document has more pages than the limit",
    "unreadable": "the file is damaged, encrypted or could not be parsed",
    "budget_exceeded": "reading the file took more time than one document may take",
    "no_text": "no page yielded any text, even by OCR",
    "scan_failed": "the virus scanner could not run, so the file was not trusted",
}


class Refused(Exception):
    """A file Parley will not index, and why: ``code`` is machine-readable, ``message`` is for the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

