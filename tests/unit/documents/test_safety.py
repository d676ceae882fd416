"""Safety checks: each poisoned fixture refused with its code, clean files pass, through the real clamscan."""

from __future__ import annotations

import dataclasses
import io
import shutil
import struct
import zipfile
import zlib

import pytest

from documents.errors import Refused
from documents.safety import Limits, check
from documents.settings import DocumentSettings
from documents.sniff import DOCX, HTML, PDF, PNG, TEXT
from tests.fixtures import documents as fx

SCANNING = Limits.from_settings(DocumentSettings())  # the real clamscan, the shipped signatures
NO_SCAN = dataclasses.replace(SCANNING, clamscan="")  # our own checks alone, without ClamAV's heuristics


def refusal(data: bytes, media_type: str, limits: Limits = NO_SCAN) -> str:
    with pytest.raises(Refused) as refused:
        check(data, media_type, limits)
    assert refused.value.message
    return refused.value.code


def test_the_scanner_is_installed() -> None:
    assert shutil.which(SCANNING.clamscan), "clamscan missing: install clamav (infra's Debian packages script)"


def test_eicar_is_found_by_clamscan_with_the_shipped_signatures() -> None:
    with pytest.raises(Refused) as refused:
        check(fx.eicar(), TEXT, SCANNING)
    assert refused.value.code == "malware_detected"
    assert "Parley.Test.EICAR" in refused.value.message


def test_eicar_inside_a_docx_is_found_too() -> None:
    with zipfile.ZipFile(io.BytesIO(fx.docx_with_table())) as package:
        parts = {i.filename: package.read(i) for i in package.infolist()}
    parts["word/media/readme.txt"] = fx.eicar()
    assert refusal(fx._zip(parts), DOCX, SCANNING) == "malware_detected"


@pytest.mark.parametrize(
    ("make", "media_type"),
    [
        (lambda: fx.text_pdf(fx.PDF_PAGES, tables={2: fx.TABLE}), PDF),
        (lambda: fx.scanned_pdf(fx.SCANNED_PAGES), PDF),
        (fx.docx_with_table, DOCX),
        (fx.html_page, HTML),
        (lambda: fx.png_of_text("Hello"), PNG),
        (lambda: b"plain words\n", TEXT),
    ],
)
def test_clean_files_pass_the_scanner_and_every_check(make, media_type: str) -> None:
    check(make(), media_type, SCANNING)


def test_a_missing_scanner_or_signature_db_fails_closed() -> None:
    assert refusal(b"hello", TEXT, dataclasses.replace(SCANNING, clamscan="/nonexistent/clamscan")) == "scan_failed"
    assert refusal(b"hello", TEXT, dataclasses.replace(SCANNING, clamav_db="/nonexistent/db")) == "scan_failed"


@pytest.mark.parametrize("hide", ["", "name", "object_stream"])
def test_pdf_javascript_is_active_content_however_it_is_hidden(hide: str) -> None:
    data = fx.pdf_with_javascript(hide=hide)
    if hide:
        assert b"/JavaScript" not in data and b"/JS " not in data  # a byte search would miss it
    assert refusal(data, PDF) == "active_content"
    assert refusal(data, PDF, SCANNING) in ("active_content", "malware_detected")  # ClamAV flags obfuscated names


@pytest.mark.parametrize(
    "extra",
    [
        {5: b"<< /Type /Action /S /Launch /F (calc.exe) >>"},
        {5: b"<< /Type /Filespec /F (a.exe) /EF << /F 6 0 R >> >>", 6: b"<< /Type /EmbeddedFile /Length 0 >>\nstream\n\nendstream"},
        {5: b"<< /Fields [] /XFA 6 0 R >>", 6: b"<< /Length 0 >>\nstream\n\nendstream"},
    ],
)
def test_other_active_pdf_content_is_refused(extra: dict[int, bytes]) -> None:
    objects = {**_one_page(), 4: b"<< /Type /Annot /Subtype /Link /Rect [0 0 1 1] /A 5 0 R >>", **extra}
    objects[3] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Annots [4 0 R] >>"
    assert refusal(fx._pdf(objects, compressed=set()), PDF) == "active_content"


def test_an_open_action_that_only_goes_to_a_page_is_fine() -> None:
    objects = _one_page()
    objects[1] = b"<< /Type /Catalog /Pages 2 0 R /OpenAction [3 0 R /Fit] >>"
    check(fx._pdf(objects, compressed=set()), PDF, NO_SCAN)


def test_too_many_pages() -> None:
    assert refusal(fx.text_pdf(fx.PDF_PAGES), PDF, dataclasses.replace(NO_SCAN, max_pages=2)) == "too_many_pages"
    assert refusal(b"a\n\fb\n\fc", TEXT, dataclasses.replace(NO_SCAN, max_pages=2)) == "too_many_pages"


def test_a_flate_bomb_in_a_pdf_stream() -> None:
    bomb = zlib.compress(bytes(20 << 20), 9)
    objects = _one_page()
    objects[3] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>"
    objects[4] = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(bomb) + bomb + b"\nendstream"
    data = fx._pdf(objects, compressed=set())
    assert refusal(data, PDF, dataclasses.replace(NO_SCAN, max_uncompressed_bytes=10 << 20)) == "decompression_bomb"
    check(data, PDF, NO_SCAN)  # 20 MiB is within the default limit


def _pdf_with_stream(encoded: bytes, filters: bytes) -> bytes:
    objects = _one_page()
    objects[3] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>"
    objects[4] = b"<< /Length %d /Filter %s >>\nstream\n" % (len(encoded), filters) + encoded + b"\nendstream"
    return fx._pdf(objects, compressed=set())


@pytest.mark.parametrize(
    ("encode", "filters"),
    [
        (lambda raw: zlib.compress(raw, 9).hex().encode() + b">", b"[/ASCIIHexDecode /FlateDecode]"),
        (lambda raw: b"\x81\x00" * (len(raw) // 128) + b"\x80", b"/RunLengthDecode"),
    ],
    ids=["hex-then-flate", "run-length"],
)
def test_a_bomb_behind_any_filter_chain_is_measured_as_the_extractor_decodes_it(encode, filters: bytes) -> None:
    data = _pdf_with_stream(encode(bytes(20 << 20)), filters)
    assert refusal(data, PDF, dataclasses.replace(NO_SCAN, max_uncompressed_bytes=10 << 20)) == "decompression_bomb"
    check(data, PDF, NO_SCAN)  # 20 MiB is within the default limit


def test_a_stream_too_large_to_decode_in_the_child_is_a_bomb() -> None:
    """512 MiB of zeros in half a megabyte, checked in a child capped at 256 MiB: the decoding itself runs out."""
    from documents.pages import PageReader

    squeeze, parts = zlib.compressobj(9), []
    for _ in range(32):
        parts.append(squeeze.compress(bytes(16 << 20)))
    data = _pdf_with_stream(b"".join(parts) + squeeze.flush(), b"/FlateDecode")
    settings = dataclasses.replace(DocumentSettings(), child_memory_mb=256)
    limits = dataclasses.replace(NO_SCAN, max_uncompressed_bytes=1 << 40)  # only the memory cap can stop it
    with PageReader(settings) as reader, pytest.raises(Refused) as refused:
        reader.check(data, PDF, limits)
    assert refused.value.code == "decompression_bomb" and "memory" in refused.value.message


def test_a_package_the_macro_scanner_cannot_read_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unreadable:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise ValueError("oletools could not parse it")

    monkeypatch.setattr("oletools.olevba.VBA_Parser", Unreadable)
    assert refusal(fx.docx_with_table(), DOCX) == "unreadable"


def test_a_damaged_pdf_is_unreadable() -> None:
    assert refusal(b"%PDF-1.7\n" + bytes(range(256)) * 8, PDF) == "unreadable"


def test_a_zip_bomb_docx() -> None:
    assert refusal(fx.zip_bomb_docx(), DOCX) == "decompression_bomb"


def test_a_small_member_with_a_high_ratio_is_not_a_bomb() -> None:
    parts = dict(fx._minimal_docx_parts("Hello"))
    parts["word/media/blank.bin"] = bytes(512 << 10)  # compresses ~1000 times, but is only 512 KiB
    check(fx._zip(parts), DOCX, NO_SCAN)


def test_docx_macros_by_part_name() -> None:
    assert refusal(fx.docx_with_macros(), DOCX) == "macros"


def test_docx_macros_found_by_olevba_under_another_name() -> None:
    parts = dict(fx._minimal_docx_parts("Hello"))
    parts["word/embeddings/oleObject1.bin"] = fx._vba_project_ole()
    assert refusal(fx._zip(parts), DOCX) == "macros"


def test_an_image_with_a_huge_declared_size_is_a_bomb() -> None:
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)
    chunk = lambda kind, body: struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))  # noqa: E731
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    assert refusal(png, PNG) == "decompression_bomb"


def _one_page() -> dict[int, bytes]:
    return {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
    }
