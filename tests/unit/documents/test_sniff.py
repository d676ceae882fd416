"""Content sniffing: every fixture typed by its bytes; lies, junk and empty files refused."""

from __future__ import annotations

import pytest

from documents.errors import Refused
from documents.sniff import DOCX, HTML, JPEG, MARKDOWN, PDF, PNG, SUPPORTED, TEXT, sniff
from tests.fixtures import documents as fx


def _jpeg() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (32, 32), 200).save(out, "JPEG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("make", "name", "declared", "expected"),
    [
        (lambda: fx.text_pdf(fx.PDF_PAGES), "report.pdf", "application/pdf", PDF),
        (lambda: fx.scanned_pdf(fx.SCANNED_PAGES), "scan.pdf", None, PDF),
        (lambda: fx.pdf_with_javascript(), "x.pdf", "application/octet-stream", PDF),
        (fx.docx_with_table, "review.docx", DOCX, DOCX),
        (fx.docx_with_macros, "review.docx", None, DOCX),  # typed here, refused by safety
        (fx.zip_bomb_docx, "bomb.docx", None, DOCX),
        (fx.html_page, "page.html", "text/html; charset=utf-8", HTML),
        (fx.html_page, "page", None, HTML),
        (lambda: b"# Notes\n\nSome *markdown*.\n", "notes.md", None, MARKDOWN),
        (lambda: b"# Notes\n\nSome *markdown*.\n", "notes", "text/markdown", MARKDOWN),
        (lambda: b"just words\n", "notes.txt", "text/plain", TEXT),
        (lambda: "\ufeffunicode caf\u00e9\n".encode(), "notes", None, TEXT),
        (lambda: fx.png_of_text("Hello"), "scan.png", "image/png", PNG),
        (_jpeg, "photo.jpg", "image/jpeg", JPEG),
        (_jpeg, "photo.png", None, JPEG),  # images are one family: a misnamed photo is still OCR'd
        (fx.eicar, "eicar.com", None, TEXT),  # printable ASCII: the scanner, not the sniffer, catches it
    ],
)
def test_every_fixture_is_typed_by_its_content(make, name: str, declared: str | None, expected: str) -> None:
    assert sniff(make(), name, declared) == expected
    assert expected in SUPPORTED


def test_a_file_lying_about_its_type_is_refused() -> None:
    data, name, declared = fx.lying_file()
    for n, d in [(name, declared), (name, None), ("scan", declared)]:
        with pytest.raises(Refused) as refused:
            sniff(data, n, d)
        assert refused.value.code == "type_mismatch"
        assert "PDF" in refused.value.message and "PNG" in refused.value.message


def test_text_claimed_as_a_binary_type_is_a_mismatch() -> None:
    with pytest.raises(Refused) as refused:
        sniff(b"plain words", "report.docx", None)
    assert refused.value.code == "type_mismatch"


@pytest.mark.parametrize(
    "data",
    [
        b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff",  # a Windows executable
        b"\x7fELF\x02\x01\x01" + bytes(64),
        bytes(range(256)) * 4,  # binary junk
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504),  # a legacy .doc
        b"PK\x03\x04" + bytes(26),  # a broken zip
    ],
)
def test_unsupported_content_is_refused_whatever_its_name(data: bytes) -> None:
    with pytest.raises(Refused) as refused:
        sniff(data, "report.pdf", "application/pdf")
    assert refused.value.code == "unsupported_type"


def test_a_zip_that_is_not_a_docx_is_unsupported() -> None:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("readme.txt", "hello")
    with pytest.raises(Refused) as refused:
        sniff(out.getvalue(), "archive.docx", None)
    assert refused.value.code == "unsupported_type"


def test_an_empty_file_is_refused() -> None:
    with pytest.raises(Refused) as refused:
        sniff(fx.empty(), "empty.pdf", "application/pdf")
    assert refused.value.code == "empty_file"


def test_generic_and_unknown_claims_say_nothing() -> None:
    pdf = fx.text_pdf(["Title\n\nBody."])
    assert sniff(pdf, "download.bin", "application/octet-stream") == PDF
    assert sniff(pdf, "", "") == PDF
    assert sniff(pdf, "report.PDF", "APPLICATION/X-PDF") == PDF
