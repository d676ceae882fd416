"""Pages read in a child process, so one hostile or huge page cannot hang or exhaust the document worker.

``PageReader`` keeps one child warm across pages and documents. The document
travels once, as a file path (bytes are written to a private temporary file
first); the child parses it once and answers page by page. Every request has a
deadline: opening the document ``open_timeout_s``, a page ``page_timeout_s``,
a safety check ``scan_timeout_s`` plus the open timeout. The child's address
space is capped (``child_memory_mb``, inherited by tesseract).

On a deadline the child is killed and replaced, and the call raises: a page
raises ``PageTimeout`` (the worker records the page as skipped and goes on; a
page is never silently empty), opening or checking raises
``Refused("unreadable")``. A child that dies (a crash, the memory cap) raises
``PageFailed`` for a page and ``Refused("unreadable")`` otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from documents.errors import Refused
from documents.extract import Document, Page, Source, open_document
from documents.settings import DocumentSettings

#: Longest a fresh child may take to import its libraries and say it is ready.
_START_TIMEOUT_S = 60.0


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
        self._process: Any = None
        self._conn: _Pipes | None = None
        self._opened: tuple | None = None  # the document the child holds: (path, media_type, size, mtime)
        self._temp = Path(tempfile.mkdtemp(prefix="parley-pages-"))
        self._bytes: bytes | None = None  # the last bytes written, kept to recognise the same object
        self._count = 0

    def page_count(self, source: Source, media_type: str) -> int:
        self._open(source, media_type)
        return self._count

    def read(self, source: Source, media_type: str, number: int) -> Page:
        """Page ``number`` (1-based); raises ``PageTimeout``/``PageFailed``, or ``Refused`` if the file cannot be parsed."""
        self._open(source, media_type)
        s = self._settings
        reply = self._ask(("page", number, s.ocr, s.ocr_dpi, s.ocr_languages), s.page_timeout_s)
        if reply is None:
            raise PageTimeout(number, f"took over {s.page_timeout_s:g} s (PARLEY_DOCUMENTS_PAGE_TIMEOUT_S)")
        if reply[0] == "died":
            raise PageFailed(number, "the extraction process died (PARLEY_DOCUMENTS_CHILD_MEMORY_MB?)")
        if reply[0] == "error":
            raise PageFailed(number, reply[1])
        return reply[1]

    def check(self, source: Source, media_type: str, limits: Any = None) -> None:
        """``safety.check`` in the child, bounded in time and memory; raises ``Refused``."""
        from documents.safety import Limits

        limits = limits or Limits.from_settings(self._settings)
        timeout = limits.scan_timeout_s + self._settings.open_timeout_s
        self._result(self._ask(("check", str(self._path(source)), media_type, limits), timeout), timeout, "check")

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self._temp, ignore_errors=True)

    def __enter__(self) -> PageReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the child

    def _open(self, source: Source, media_type: str) -> None:
        path = self._path(source)
        stat = path.stat()
        key = (str(path), media_type, stat.st_size, stat.st_mtime_ns)
        if self._opened == key and self._process is not None:
            return
        timeout = self._settings.open_timeout_s
        self._opened = None
        self._count = self._result(self._ask(("open", str(path), media_type), timeout), timeout, "open")
        self._opened = key

    def _result(self, reply: tuple | None, timeout: float, what: str) -> Any:
        if reply is None:
            raise Refused("unreadable", f"The file took over {timeout:g} s to {what}.")
        if reply[0] == "died":
            raise Refused("unreadable", f"The file crashed the reader ({what}).")
        if reply[0] == "refused":
            raise Refused(reply[1], reply[2])
        if reply[0] == "error":
            raise Refused("unreadable", f"The file could not be read ({reply[1]}).")
        return reply[1]

    def _path(self, source: Source) -> Path:
        if isinstance(source, (str, Path)):
            return Path(source)
        target = self._temp / "document"
        if source is not self._bytes:
            target.write_bytes(source)
            self._bytes = source
            self._opened = None  # same path, new content: the child must reopen even if size and mtime agree
        return target

    def _ask(self, request: tuple, timeout: float) -> tuple | None:
        """The child's reply, None on timeout (the child is then killed), ("died",) if it exited."""
        self._start()
        assert self._conn is not None
        try:
            self._conn.send(request)
            if not self._conn.poll(timeout):
                self._stop()
                return None
            return self._conn.recv()
        except (EOFError, OSError):
            self._stop()
            return ("died",)

    def _start(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        self._stop()
        # A fresh interpreter, not multiprocessing: no fork of the worker's Kafka threads, and no re-import of
        # whatever __main__ started the worker (spawn's habit). Requests and replies are pickled over two pipes.
        from_parent, to_child = os.pipe()  # (read, write)
        from_child, to_parent = os.pipe()
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-c", "import sys; from documents.pages import _serve; _serve(*map(int, sys.argv[1:]))"]
        self._process = subprocess.Popen(
            [*command, str(from_parent), str(to_parent), str(self._settings.child_memory_mb)],
            pass_fds=(from_parent, to_parent),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a kill takes its tesseract or clamscan too
        )
        os.close(from_parent)
        os.close(to_parent)
        self._conn = _Pipes(Connection(to_child, readable=False), Connection(from_child, writable=False))
        if not self._conn.poll(_START_TIMEOUT_S):
            self._stop()
            raise RuntimeError("the page-reading child did not start")
        self._conn.recv()

    def _stop(self) -> None:
        if self._process is not None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._process.wait(5)
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn, self._opened = None, None, None


class _Pipes:
    """One connection made of two one-way pipes (what a child started by subprocess can inherit)."""

    def __init__(self, send: Connection, receive: Connection) -> None:
        self._send, self._receive = send, receive

    def send(self, obj: Any) -> None:
        self._send.send(obj)

    def recv(self) -> Any:
        return self._receive.recv()

    def poll(self, timeout: float) -> bool:
        return self._receive.poll(timeout)

    def close(self) -> None:
        self._send.close()
        self._receive.close()


def _serve(receive_fd: int, send_fd: int, memory_mb: int) -> None:
    """The child: cap memory, load the libraries, then answer requests until the pipe closes."""
    import resource

    conn = _Pipes(Connection(send_fd, readable=False), Connection(receive_fd, writable=False))

    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    import documents.formats.docx  # noqa: F401  (imported now so the first page does not pay for it)
    import documents.formats.html  # noqa: F401
    import documents.formats.image  # noqa: F401
    import documents.formats.pdf  # noqa: F401

    document: Document | None = None
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        op, *args = request
        try:
            if op == "open":
                if document is not None:
                    document.close()
                    document = None
                document = open_document(Path(args[0]), args[1])
                conn.send(("ok", document.page_count))
            elif op == "page":
                number, ocr, dpi, languages = args
                assert document is not None, "page before open"
                conn.send(("ok", document.page(number, ocr=ocr, dpi=dpi, languages=languages)))
            elif op == "check":
                from documents.safety import check

                check(Path(args[0]).read_bytes(), args[1], args[2])
                conn.send(("ok", None))
        except Refused as refused:
            conn.send(("refused", refused.code, refused.message))
        except MemoryError:
            conn.send(("error", "out of memory (PARLEY_DOCUMENTS_CHILD_MEMORY_MB)"))
        except Exception as exc:  # the parent decides; the child stays up for the next request
            conn.send(("error", type(exc).__name__))  # the type only: messages may quote the document
