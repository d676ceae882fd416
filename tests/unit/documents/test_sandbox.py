"""The extraction child's sandbox: no secrets, no network, no files but its own; plain-data replies; a budget.

The probe (``sandbox_probe``) runs what an exploit in a parser would try, inside
a child started exactly as ``PageReader`` starts its own; the same attempts
made here, unconfined, succeed, so each refusal is the sandbox's doing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import socket
import subprocess
import zlib
from pathlib import Path

import pytest

from documents import sandbox
from documents.errors import Refused
from documents.pages import PageReader, _page, _reply
from documents.settings import DocumentSettings
from documents.sniff import PDF
from tests.fixtures import documents as fx
from tests.unit.documents.sandbox_probe import attempt

SECRET = "kek-material-0123456789"


@pytest.fixture
def listener():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def kek(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A key file anyone may read by its mode (0644), named in the worker's environment, next to a password."""
    path = tmp_path / "kek.json"
    path.write_text(SECRET)
    path.chmod(0o644)
    monkeypatch.setenv("PARLEY_KMS_KEY_FILE", str(path))
    monkeypatch.setenv("PARLEY_CASSANDRA_PASSWORD", "hunter2")
    return path


def probe(port: int, path: Path) -> tuple[dict, Path]:
    child = sandbox.start(
        "tests.unit.documents.sandbox_probe:probe",
        [str(port), str(path)],
        readable=(str(sandbox.ROOT / "tests"),),
        stdout=subprocess.PIPE,
    )
    try:
        out, _ = child.process.communicate(timeout=120)
    finally:
        child.close()
    return json.loads(out), child.home


def test_unconfined_the_same_attempts_succeed(listener: int, kek: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(kek.parent)
    found = attempt(str(listener), str(kek))
    assert found["connect"] == "connected" and found["read"] == SECRET
    assert "PARLEY_CASSANDRA_PASSWORD" in found["env"]


def test_the_child_cannot_connect_out(listener: int, kek: Path) -> None:
    found, _ = probe(listener, kek)
    assert found["connect"] != "connected"


def test_the_child_cannot_read_the_kek_even_knowing_its_path(listener: int, kek: Path) -> None:
    found, _ = probe(listener, kek)
    assert found["read"] == "PermissionError"


def test_the_child_sees_none_of_the_workers_environment(listener: int, kek: Path) -> None:
    found, _ = probe(listener, kek)
    assert set(found["env"]) <= {"PATH", "PYTHONPATH", "LANG", "HOME", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "TESSDATA_PREFIX"}
    assert not any(SECRET in v or "hunter2" in v or str(kek) in v for v in found["env"].values())


def test_the_child_works_in_a_private_directory_removed_afterwards(listener: int, kek: Path) -> None:
    found, home = probe(listener, kek)
    assert found["cwd"] == found["env"]["TMPDIR"] == found["env"]["HOME"] == str(home)
    assert found["write_home"] is True
    assert not home.exists()


def test_the_child_cannot_signal_the_worker() -> None:
    child = sandbox.start("tests.unit.documents.sandbox_probe:signal_parent", [], readable=(str(sandbox.ROOT / "tests"),), stdout=subprocess.PIPE)
    try:
        out, _ = child.process.communicate(timeout=120)
    finally:
        child.close()
    assert json.loads(out) == {"signal": "PermissionError"}


def test_this_host_gives_the_child_every_layer(listener: int, kek: Path) -> None:
    """Linux with user namespaces and Landlock (this CI host): a network namespace, Landlock with TCP and signal rules."""
    found, _ = probe(listener, kek)
    assert found["confined"]["network_namespace"] is True
    assert found["confined"]["landlock"] >= 6


def test_the_page_readers_child_is_that_sandbox(kek: Path) -> None:
    with PageReader(DocumentSettings()) as reader:
        assert reader.page_count(fx.text_pdf(fx.PDF_PAGES), PDF) == 3
        pid = reader._child.process.pid
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
        own_net = os.readlink("/proc/self/ns/net")
        child_net = os.readlink(f"/proc/{pid}/ns/net")
    assert b"PARLEY_" not in environ and b"hunter2" not in environ
    assert "\nSeccomp:\t2\n" in status and "\nNoNewPrivs:\t1\n" in status
    assert "\nCapEff:\t0000000000000000\n" in status
    assert child_net != own_net


def test_the_opened_document_is_never_a_file_and_the_directory_is_in_ram(kek: Path) -> None:
    """A worker killed mid-document leaves nothing of it on a disk (review H8): the child gets the
    document through its pipe, and its directory is on /dev/shm where this host has one."""
    pdf = fx.text_pdf(fx.PDF_PAGES)
    with PageReader(DocumentSettings()) as reader:
        assert reader.page_count(pdf, PDF) == 3
        home = reader._child.home
        files = [p.read_bytes() for p in home.rglob("*") if p.is_file()]
    assert home.parent == Path("/dev/shm")
    assert not [f for f in files if pdf[:512] in f]


def test_a_directory_a_killed_worker_left_is_removed_by_the_next_start(tmp_path: Path) -> None:
    dead = _a_dead_pid()
    leftover = sandbox._scratch() / f"parley-child-{dead}-abc123"
    leftover.mkdir()
    (leftover / "page.png").write_bytes(b"derived plaintext")
    live = sandbox._scratch() / f"parley-child-{os.getpid()}-def456"  # a live worker's: kept
    live.mkdir()
    try:
        child = sandbox.start("tests.unit.documents.sandbox_probe:signal_parent", [], readable=(str(sandbox.ROOT / "tests"),), stdout=subprocess.PIPE)
        child.process.communicate(timeout=120)
        child.close()
        assert not leftover.exists()
        assert live.exists()
    finally:
        live.rmdir()


def _a_dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# ---------------------------------------------------------------- plain data, checked


@pytest.mark.parametrize(
    "raw",
    [
        pickle.dumps(("ok", 3)),  # the old protocol: never unpickled now
        b"not json",
        b'{"ok": 3}',
        b"[]",
        b'["refused", "not_a_code", "x"]',
        b'["refused", "unreadable"]',
        b'["error", 3]',
        b'["surprise", 1]',
    ],
)
def test_replies_that_are_not_the_protocol_are_rejected(raw: bytes) -> None:
    assert _reply(raw) is None


def test_a_refusal_from_the_child_is_bounded() -> None:
    assert _reply(json.dumps(["refused", "unreadable", "x" * 10_000]).encode()) == ["refused", "unreadable", "x" * 500]


@pytest.mark.parametrize(
    "value",
    [
        {"number": 2, "method": "text", "blocks": []},  # another page than asked
        {"number": 1, "method": "magic", "blocks": []},
        {"number": 1, "method": "text", "blocks": [{"kind": "script", "text": "x"}]},
        {"number": 1, "method": "text", "blocks": [{"kind": "paragraph", "text": 7}]},
        {"number": 1, "method": "text"},
        [1, "text", []],
    ],
)
def test_malformed_pages_are_rejected(value: object) -> None:
    with pytest.raises((ValueError, TypeError, KeyError, IndexError)):
        _page(value, 1)


def test_a_well_formed_page_is_rebuilt() -> None:
    page = _page({"number": 1, "method": "ocr", "blocks": [{"kind": "heading", "text": "Otters"}]}, 1)
    assert page.method == "ocr" and page.blocks[0].kind == "heading" and page.text == "Otters"


# ---------------------------------------------------------------- the document's budget


def slow_pdf(glyphs: int = 300_000) -> bytes:
    """A page of a few kilobytes that costs pdfplumber about a minute of CPU: 300,000 one-glyph text runs."""
    ops = b"BT /F1 1 Tf " + b"0.01 0 Td (a) Tj " * glyphs + b"ET"
    content = zlib.compress(ops, 9)
    return fx._pdf(
        {
            1: b"<< /Type /Catalog /Pages 2 0 R >>",
            2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            b"/Contents 5 0 R >>",
            4: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            5: b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
        },
        compressed=set(),
    )


def test_a_hostile_pdf_stops_at_its_cpu_budget() -> None:
    settings = dataclasses.replace(DocumentSettings(), document_cpu_s=2, page_timeout_s=600.0, ocr=False)
    data = slow_pdf()
    assert len(data) < 20_000
    with PageReader(settings) as reader:
        with pytest.raises(Refused) as refused:
            reader.read(data, PDF, 1)
        assert reader._child is None
    assert refused.value.code == "budget_exceeded"
    assert "PARLEY_DOCUMENTS_DOCUMENT_CPU_S" in refused.value.message


def test_a_hostile_pdf_stops_at_its_wall_clock_budget() -> None:
    settings = dataclasses.replace(
        DocumentSettings(), document_timeout_s=3.0, document_cpu_s=3600, page_timeout_s=600.0, ocr=False
    )
    with PageReader(settings) as reader:
        with pytest.raises(Refused) as refused:
            reader.read(slow_pdf(), PDF, 1)
        assert reader._child is None
    assert refused.value.code == "budget_exceeded"
    assert "PARLEY_DOCUMENTS_DOCUMENT_TIMEOUT_S" in refused.value.message
