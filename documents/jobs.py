"""One document's processing: check, then page by page extract → chunk → embed → index, announcing as it goes.

The steps, for a ``DocumentUploaded``:

1. The original is read from the blob store and checked (``documents.safety``):
   a refused file ends at once with ``DocumentFailed`` and nothing indexed.
2. Pages are read one at a time, each bounded in time (``documents.pages``),
   chunked (``documents.chunking``), embedded and written to the index.
   After every ``batch_pages`` pages a ``DocumentPagesExtracted`` says pages
   1..N are searchable: a user may ask about them while the rest is read.
3. ``DocumentIndexed`` when every page is done, or ``DocumentFailed`` with
   ``no_text`` when no page had any text, OCR included (a scanned file that
   yields nothing is a failure the user is told of, never "ready" with zero
   chunks).

Resumable: a job starts after the last page the index holds whole
(``pages_written``), so a worker killed mid-document is followed by one that
carries on; chunk ids are deterministic, so a page done twice writes the same
rows. Cancellable: before each page the document's status row is read; a
deleted document stops the job and its index is purged.

No Kafka, no Cassandra here: the shell (``documents.worker``) hands in the
index, the blob store, the status check and ``emit``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from documents import safety
from documents.blobs import BlobStore, original_at
from documents.chunking import chunk_page
from documents.embedding import Embedder
from documents.errors import Refused
from documents.extract import Page
from documents.pages import PageFailed, PageReader
from documents.settings import DocumentSettings
from schemas import events as ev
from schemas import sealing

log = logging.getLogger(__name__)

Emit = Callable[[ev.DocumentEvent], Awaitable[None]]


class Index(Protocol):
    async def write_page(self, document_id: str, number: int, text: str, method: str, chunks: Any, vectors: Any) -> None: ...
    async def pages_written(self, document_id: str) -> int: ...
    async def purge(self, document_id: str) -> None: ...
    async def counts(self, document_id: str) -> tuple[int, int]: ...  # (chunks, pages read by OCR), every page


class Cancelled(Exception):
    """The document was deleted while it was being processed."""


@dataclass
class Progress:
    """What a job has done so far (across a restart, only what this run did: the announcements say
    how far the index reaches, ``pages_ready`` on the status row)."""

    pages_total: int = 0
    pages_done: int = 0
    ocr_pages: int = 0
    chunks: int = 0
    embedded: bool = True  # every chunk written so far has its vector


class Job:
    def __init__(
        self,
        settings: DocumentSettings,
        blobs: BlobStore,
        index: Index,
        embedder: Embedder,
        emit: Emit,
        alive: Callable[[ev.DocumentUploaded], Awaitable[bool]],
    ) -> None:
        self.settings = settings
        self.blobs = blobs
        self.index = index
        self.embedder = embedder
        self.emit = emit
        self.alive = alive  # the document still exists (not deleted)
        self.limits = safety.Limits.from_settings(settings)
        self.reader = PageReader(settings)  # one warm child process for every page of every job

    async def run(self, up: ev.DocumentUploaded) -> Progress:
        started = time.monotonic()
        log.info("document job started", extra={"document_id": up.document_id, "media_type": up.media_type, "bytes": up.size_bytes})
        progress = await self._run(up)
        log.info(
            "document job ended",
            extra={"document_id": up.document_id, "pages": progress.pages_done, "ocr_pages": progress.ocr_pages,
                   "chunks": progress.chunks, "ms": round((time.monotonic() - started) * 1000)},
        )  # fmt: skip
        return progress

    async def _run(self, up: ev.DocumentUploaded) -> Progress:
        progress = Progress()
        if not await self.alive(up):
            await self.index.purge(up.document_id, up.user_id)
            return progress
        try:
            data = sealing.open_bytes(await asyncio.to_thread(self.blobs.get, up.storage_uri), at=original_at(up.document_id))
        except (FileNotFoundError, ValueError):
            await self._fail(up, Refused("unreadable", "the uploaded original is gone from the blob store"))
            return progress
        try:
            # The checks run in the reader's child: bounded in time and memory, whatever the file does.
            await asyncio.to_thread(self.reader.check, data, up.media_type, self.limits)
            await self._pages(up, data, self.reader, progress)
        except Refused as refused:
            await self._fail(up, refused)
        except Cancelled:
            await self.index.purge(up.document_id, up.user_id)
            log.info("document deleted while processing; stopped", extra={"document_id": up.document_id})
        return progress

    def close(self) -> None:
        self.reader.close()

    async def _pages(self, up: ev.DocumentUploaded, data: bytes, reader: PageReader, progress: Progress) -> None:
        total = await asyncio.to_thread(reader.page_count, data, up.media_type)
        if total > self.settings.max_pages:
            raise Refused("too_many_pages", f"the document has {total} pages; the limit is {self.settings.max_pages}")
        progress.pages_total = total
        first = await self.index.pages_written(up.document_id) + 1
        if first > 1:  # resumed: what an earlier run indexed is searchable (again) at once
            await self.emit(self._announce(up, 1, first - 1, progress, chars=0, ocr=0, chunks=0))
        section = ""
        batch_start, batch_chars, batch_ocr, batch_chunks = first, 0, 0, 0
        for number in range(first, total + 1):
            if not await self.alive(up):
                raise Cancelled
            try:
                page = await asyncio.to_thread(reader.read, data, up.media_type, number)
            except PageFailed as failed:  # skipped, not lost silently: the page is kept, empty, and logged
                log.warning("a page could not be read; it is indexed empty",
                            extra={"document_id": up.document_id, "page": number, "reason": failed.reason})  # fmt: skip
                page = Page(number, (), "empty")
            chunks, section = chunk_page(
                up.document_id,
                page,
                section=section,
                budget_tokens=self.settings.chunk_tokens,
                overlap_tokens=self.settings.chunk_overlap_tokens,
                count_tokens=self.embedder.count_tokens,
            )
            vectors = await self._embed([c.full_text for c in chunks], up) if chunks else []  # a split table's header too
            progress.embedded = progress.embedded and vectors is not None
            await self.index.write_page(up.document_id, number, page.text, page.method, chunks, vectors, up.user_id)
            progress.pages_done += 1
            progress.chunks += len(chunks)
            ocr = int(page.method == "ocr")
            progress.ocr_pages += ocr
            batch_chars += len(page.text)
            batch_ocr += ocr
            batch_chunks += len(chunks)
            if number - batch_start + 1 >= self.settings.batch_pages or number == total:
                await self.emit(self._announce(up, batch_start, number, progress, batch_chars, batch_ocr, batch_chunks))
                batch_start, batch_chars, batch_ocr, batch_chunks = number + 1, 0, 0, 0
        if not await self.alive(up):
            raise Cancelled
        chunks, ocr_pages = await self.index.counts(up.document_id)  # this run's and any earlier run's pages
        if chunks == 0:
            raise Refused("no_text", "no text was found on any page, OCR included: nothing in it can be searched or cited")
        await self.emit(
            ev.DocumentIndexed(
                document_id=up.document_id,
                user_id=up.user_id,
                trace_id=up.trace_id,
                chunks=chunks,
                embedding_model=self.embedder.name if progress.embedded else "",
                pages_total=total,
                ocr_pages=ocr_pages,
            )
        )

    async def _embed(self, texts: list[str], up: ev.DocumentUploaded) -> list[list[float]] | None:
        """The chunks' vectors; None (keyword search only, for these chunks) when the embedder fails."""
        try:
            return await asyncio.to_thread(self.embedder.embed, texts)
        except Exception as exc:  # an embedding server down must not lose the document: keyword search still finds it
            log.warning("embedding failed; the page is indexed for keyword search only",
                        extra={"document_id": up.document_id, "error": type(exc).__name__})  # fmt: skip
            return None

    def _announce(
        self, up: ev.DocumentUploaded, first: int, last: int, progress: Progress, chars: int, ocr: int, chunks: int
    ) -> ev.DocumentPagesExtracted:
        return ev.DocumentPagesExtracted(
            document_id=up.document_id,
            user_id=up.user_id,
            trace_id=up.trace_id,
            pages=last - first + 1,
            chars=chars,
            first_page=first,
            last_page=last,
            pages_total=progress.pages_total,
            ocr_pages=ocr,
            chunks=chunks,
        )

    async def _fail(self, up: ev.DocumentUploaded, refused: Refused) -> None:
        await self.index.purge(up.document_id, up.user_id)  # nothing of a refused file is ever served
        log.info("document refused", extra={"document_id": up.document_id, "error_code": refused.code})
        await self.emit(
            ev.DocumentFailed(
                document_id=up.document_id,
                user_id=up.user_id,
                trace_id=up.trace_id,
                error_code=refused.code,
                error_message=refused.message,
            )
        )
