"""Pages read in a sandboxed child process: a hostile file can neither hang the worker nor reach what it holds.

``PageReader`` runs one child per document (``documents.sandbox``: an empty
environment, a private directory, no network, read access to code and system
libraries only). The document is written into the child's directory once; the
child parses it once and answers page by page. A new document gets a new
child, so nothing of one user's file is left in the process that reads the
next one's.

Requests and replies are JSON over two pipes, a reply at most
``_MAX_REPLY_BYTES``; the parent checks each reply's shape before it believes
it (a compromised child can lie, but only in well-formed pages).

Bounds: opening the document ``open_timeout_s``, a page ``page_timeout_s``, a
safety check ``scan_timeout_s`` plus the open timeout; the child's address
space ``child_memory_mb`` (inherited by tesseract and clamscan). And one
budget for the whole document, across pages and child restarts: wall clock
``document_timeout_s`` counted by the parent, CPU ``document_cpu_s`` enforced
by the kernel on the child (``RLIMIT_CPU``). A document over its budget raises
``Refused("budget_exceeded")``: the worker fails it with that reason.

On a page deadline the child is killed and replaced, and the page raises
``PageTimeout`` (the worker records the page as skipped and goes on; a page is
never silently empty); opening or checking raises ``Refused("unreadable")``. A
child that dies (a crash, the memory cap) or answers nonsense raises
``PageFailed`` for a page and ``Refused("unreadable")`` otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from documents import sandbox
from documents.errors import CODES, Refused
from documents.extract import Block, Document, Page, Source, open_document
from documents.settings import DocumentSettings

log = logging.getLogger(__name__)

#: Longest a fresh child may take to import its libraries and say it is ready.
_START_TIMEOUT_S = 60.0
#: Largest message either side reads: a reply (larger means the child misbehaves: a page's text is far
#: smaller), or the document itself (PARLEY_DOCUMENTS_MAX_BYTES is 25 MiB by default).
_MAX_REPLY_BYTES = 64 << 20
_METHODS = frozenset({"text", "ocr", "empty"})
_KINDS = frozenset({"heading", "paragraph", "table"})


class PageFailed(Exception):
    """Page ``number`` could not be read; ``reason`` says why (no document text in it)."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"page {number}: {reason}")
        self.number = number
        self.reason = reason


class PageTimeout(PageFailed):
    """Page ``number`` took longer than ``PARLEY_DOCUMENTS_PAGE_TIMEOUT_S``; its child was killed."""


class PageReader:
    def __init__(self, settings: DocumentSettings) -> None:
        self._settings = settings
        self._child: sandbox.Confined | None = None
        self._conn: _Pipes | None = None
        self._key: object = None  # the document being read: its bytes object, or (path, size, mtime)
        self._data = b""
        self._deadline = 0.0  # time.monotonic() when the document's wall-clock budget ends
        self._cpu_spent = 0.0  # CPU seconds of this document's children already killed
        self._opened = False
        self._count = 0
        self._warned = False

    def page_count(self, source: Source, media_type: str) -> int:
        self._open(source, media_type)
        return self._count

    def read(self, source: Source, media_type: str, number: int) -> Page:
        """Page ``number`` (1-based); raises ``PageTimeout``/``PageFailed``, or ``Refused`` if the file cannot be parsed
        or its budget is spent."""
        self._open(source, media_type)
        s = self._settings
        request = {"op": "page", "number": number, "ocr": s.ocr, "dpi": s.ocr_dpi, "languages": s.ocr_languages}
        reply = self._ask(request, s.page_timeout_s)
        if reply is None:
            raise PageTimeout(number, f"took over {s.page_timeout_s:g} s (PARLEY_DOCUMENTS_PAGE_TIMEOUT_S)")
        if reply[0] == "died":
            raise PageFailed(number, "the extraction process died (PARLEY_DOCUMENTS_CHILD_MEMORY_MB?)")
        if reply[0] == "error":
            raise PageFailed(number, reply[1])
        try:
            return _page(reply[1], number)
        except (ValueError, TypeError, KeyError, IndexError):
            self._stop()
            raise PageFailed(number, "the extraction process answered with a malformed page")

    def check(self, source: Source, media_type: str, limits: Any = None) -> None:
        """``safety.check`` in the child, bounded in time and memory; raises ``Refused``."""
        from documents.safety import Limits

        self._begin(source)
        limits = limits or Limits.from_settings(self._settings)
        timeout = limits.scan_timeout_s + self._settings.open_timeout_s
        request = {"op": "check", "media_type": media_type, "limits": dataclasses.asdict(limits)}
        if self._result(self._ask(request, timeout), timeout, "check") is not None:
            raise Refused("unreadable", "The file could not be read (the check's answer was malformed).")

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> PageReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the document and its budget

    def _begin(self, source: Source) -> None:
        """Make ``source`` the document being read; a different one gets a fresh child and a fresh budget."""
        if isinstance(source, (str, Path)):
            stat = Path(source).stat()
            key: object = (str(source), stat.st_size, stat.st_mtime_ns)
            if key == self._key:
                return
            data = Path(source).read_bytes()
        else:
            if source is self._key:
                return
            key, data = source, source
        self._stop()
        self._key, self._data = key, data
        self._deadline = time.monotonic() + self._settings.document_timeout_s
        self._cpu_spent = 0.0

    def _open(self, source: Source, media_type: str) -> None:
        self._begin(source)
        if self._opened and self._child is not None:
            return
        timeout = self._settings.open_timeout_s
        count = self._result(self._ask({"op": "open", "media_type": media_type}, timeout), timeout, "open")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            self._stop()
            raise Refused("unreadable", "The file could not be read (the page count was malformed).")
        self._count, self._opened = count, True

    def _over_budget(self, cpu: bool) -> Refused:
        s = self._settings
        self._stop()
        if cpu:
            return Refused("budget_exceeded", f"Reading the file took over {s.document_cpu_s} s of CPU (PARLEY_DOCUMENTS_DOCUMENT_CPU_S).")
        return Refused("budget_exceeded", f"Reading the file took over {s.document_timeout_s:g} s (PARLEY_DOCUMENTS_DOCUMENT_TIMEOUT_S).")

    # ------------------------------------------------------------ the child

    def _result(self, reply: list | None, timeout: float, what: str) -> Any:
        if reply is None:
            raise Refused("unreadable", f"The file took over {timeout:g} s to {what}.")
        if reply[0] == "died":
            raise Refused("unreadable", f"The file crashed the reader ({what}).")
        if reply[0] == "refused":
            raise Refused(reply[1], reply[2])
        if reply[0] == "error":
            raise Refused("unreadable", f"The file could not be read ({reply[1]}).")
        return reply[1]

    def _ask(self, request: dict, timeout: float) -> list | None:
        """The child's checked reply: ["ok", value], ["refused", code, message] or ["error", reason]; ["died"] if it
        exited or answered nonsense; None on timeout (the child is then killed). Raises ``Refused`` over budget."""
        if self._deadline <= time.monotonic():
            raise self._over_budget(cpu=False)
        self._start()
        assert self._conn is not None and self._child is not None
        remaining = self._deadline - time.monotonic()
        try:
            self._conn.send_bytes(json.dumps(request).encode())
            if not self._conn.poll(min(timeout, remaining)):
                if remaining < timeout:
                    raise self._over_budget(cpu=False)
                self._stop()
                return None
            raw = self._conn.recv_bytes(_MAX_REPLY_BYTES)  # OSError over the cap
        except (EOFError, OSError):  # it exited, or sent more than the cap
            try:
                self._child.process.wait(1)  # a child killed by RLIMIT_CPU is already gone
            except Exception:
                pass
            if self._child.process.returncode == -signal.SIGXCPU:
                raise self._over_budget(cpu=True)
            self._stop()
            return ["died"]
        reply = _reply(raw)
        if reply is None:
            self._stop()
            return ["died"]
        return reply

    def _start(self) -> None:
        if self._child is not None and self._child.process.poll() is None:
            return
        self._stop()
        s = self._settings
        cpu = max(1, math.ceil(s.document_cpu_s - self._cpu_spent))
        from_parent, to_child = os.pipe()  # (read, write)
        from_child, to_parent = os.pipe()
        try:
            self._child = sandbox.start(
                "documents.pages:_serve",
                [str(from_parent), str(to_parent), str(s.child_memory_mb), str(cpu)],
                readable=(s.clamav_db,) if s.clamscan and os.path.exists(s.clamav_db) else (),
                pass_fds=(from_parent, to_parent),
            )
        finally:
            os.close(from_parent)
            os.close(to_parent)
        self._conn = _Pipes(Connection(to_child, readable=False), Connection(from_child, writable=False))
        if not self._conn.poll(_START_TIMEOUT_S):
            self._stop()
            raise RuntimeError("the page-reading child did not start")
        try:
            ready = _reply(self._conn.recv_bytes(_MAX_REPLY_BYTES))
        except (EOFError, OSError):  # it exited: it could not confine itself, or its libraries did not load
            ready = None
        if ready is None or ready[0] != "ok" or not isinstance(ready[1], dict):
            self._stop()
            raise RuntimeError("the page-reading child did not start")
        # The opened original goes through the pipe, never to a file: a worker killed mid-document
        # would leave it on disk, unsealed (review H8).
        try:
            self._conn.send_bytes(self._data)
        except OSError:
            self._stop()
            raise RuntimeError("the page-reading child did not take the document") from None
        if not self._warned and not (ready[1].get("network_namespace") and ready[1].get("landlock")):
            self._warned = True  # once per reader: docs/operations.md says what is lost
            log.warning("the extraction sandbox is partial on this host", extra={"sandbox": ready[1]})

    def _stop(self) -> None:
        if self._child is not None:
            self._cpu_spent += _cpu_seconds(self._child.process.pid)
            self._child.close()
        if self._conn is not None:
            self._conn.close()
        self._child, self._conn, self._opened = None, None, False


def _reply(raw: bytes) -> list | None:
    """A reply's outer shape, checked: None if it is not one the protocol has."""
    try:
        reply = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(reply, list) or not reply:
        return None
    if reply[0] == "ok" and len(reply) == 2:
        return reply
    if reply[0] == "error" and len(reply) == 2 and isinstance(reply[1], str):
        return ["error", reply[1][:200]]
    if reply[0] == "refused" and len(reply) == 3 and reply[1] in CODES and isinstance(reply[2], str):
        return ["refused", reply[1], reply[2][:500]]
    return None


def _page(value: Any, number: int) -> Page:
    """A page from the child's JSON, every field checked; raises ValueError/TypeError/KeyError if malformed."""
    if value["number"] != number or value["method"] not in _METHODS or not isinstance(value["blocks"], list):
        raise ValueError("malformed page")
    blocks = []
    for block in value["blocks"]:
        if block["kind"] not in _KINDS or not isinstance(block["text"], str):
            raise ValueError("malformed block")
        blocks.append(Block(block["kind"], block["text"]))
    return Page(number, tuple(blocks), value["method"])


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU a live (or unreaped) process has used; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Pipes:
    """One connection made of two one-way pipes (what a child started by subprocess can inherit); bytes only."""

    def __init__(self, send: Connection, receive: Connection) -> None:
        self._send, self._receive = send, receive

    def send_bytes(self, data: bytes) -> None:
        self._send.send_bytes(data)

    def recv_bytes(self, maxlength: int) -> bytes:
        return self._receive.recv_bytes(maxlength)

    def poll(self, timeout: float) -> bool:
        return self._receive.poll(timeout)

    def close(self) -> None:
        self._send.close()
        self._receive.close()


def _serve(confined: dict, receive_fd: str, send_fd: str, memory_mb: str, cpu_s: str) -> None:
    """The child, already confined (``documents.sandbox``): cap memory, load the libraries, cap CPU, then take
    the document (the first message after its ``ok``) and answer requests about it until the pipe closes."""
    import resource

    conn = _Pipes(Connection(int(send_fd), readable=False), Connection(int(receive_fd), writable=False))
    memory = int(memory_mb) << 20
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    import documents.formats.docx  # noqa: F401  (imported now so the first page does not pay for it)
    import documents.formats.html  # noqa: F401
    import documents.formats.image  # noqa: F401
    import documents.formats.pdf  # noqa: F401
    from documents.safety import Limits, check

    # The budget starts now, with the file: SIGXCPU (fatal) at the soft limit, SIGKILL at the hard one.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = math.ceil(usage.ru_utime + usage.ru_stime) + int(cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

    def send(*reply: Any) -> None:
        conn.send_bytes(json.dumps(reply).encode())

    document: Document | None = None
    send("ok", confined)
    try:
        data = conn.recv_bytes(_MAX_REPLY_BYTES)
    except EOFError:
        return
    while True:
        try:
            request = json.loads(conn.recv_bytes(_MAX_REPLY_BYTES))
        except EOFError:
            return
        op = request["op"]
        try:
            if op == "open":
                if document is not None:
                    document.close()
                    document = None
                document = open_document(data, request["media_type"])
                send("ok", document.page_count)
            elif op == "page":
                assert document is not None, "page before open"
                page = document.page(request["number"], ocr=request["ocr"], dpi=request["dpi"], languages=request["languages"])
                blocks = [{"kind": b.kind, "text": b.text} for b in page.blocks]
                send("ok", {"number": page.number, "method": page.method, "blocks": blocks})
            elif op == "check":
                check(data, request["media_type"], Limits(**request["limits"]))
                send("ok", None)
        except Refused as refused:
            send("refused", refused.code, refused.message)
        except MemoryError:
            send("error", "out of memory (PARLEY_DOCUMENTS_CHILD_MEMORY_MB)")
        except Exception as exc:  # the parent decides; the child stays up for the next request
            send("error", type(exc).__name__)  # the type only: messages may quote the document
