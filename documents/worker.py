"""The document worker: a member of the ``documents`` consumer group on ``docs.events``.

Each ``DocumentUploaded`` is a job (``documents.jobs``), run to its end before
its offset is committed: a worker killed mid-document leaves the record
uncommitted, and whoever gets the partition next runs the job again from the
last page the index holds. ``DocumentDeleted`` purges the index and the
original (a job in progress notices the delete before its next page). The
worker's own announcements pass by on the same topic and are skipped.

While a job runs, its partitions are paused and the consumer is polled
between pages, so the group does not take a long job for a dead member
(``max.poll.interval.ms``) and a rebalance is answered. The process runs at a
lower CPU priority (``PARLEY_DOCUMENTS_NICE``): on a machine it shares with
chat's processes, extraction and OCR yield to them. Scale by starting more
workers (up to the partitions of ``docs.events``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid

from documents.blobs import blob_store
from documents.embedding import embedder_from
from documents.index import DocumentIndex
from documents.jobs import Job
from documents.safety import missing_signatures
from documents.settings import DocumentSettings
from documents.status import DELETED
from parley.cassandra import AsyncCql
from parley.consumer import Delivery, EventConsumer
from parley.errors import ConfigError, Unavailable
from parley.kafka import EventProducer
from parley.metrics import Readiness
from parley.retry import retrying
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import events as ev

log = logging.getLogger(__name__)

GROUP = "documents"
TOPIC = "docs.events"
#: Pause between attempts of a job that failed for want of Kafka or Cassandra.
RETRY_PAUSE_S = 2.0


class DocumentWorker:
    def __init__(self, settings: DocumentSettings, kafka: KafkaSettings, cassandra: CassandraSettings) -> None:
        self.settings = settings
        self.kafka = kafka
        self.cql = AsyncCql(cassandra)
        self.index = DocumentIndex(self.cql)
        self.blobs = blob_store(settings.blob_url)
        self.producer = EventProducer(kafka)
        self.readiness = Readiness()
        self.consumer = EventConsumer(
            kafka,
            kafka.topic_prefix + GROUP,
            [TOPIC],
            self.producer,
            on_assign=lambda *_: self.readiness.ready(),  # the group's assignment is held: ready for uploads
            **{"max.poll.interval.ms": 300_000, "session.timeout.ms": 15_000},
        )
        self.job = Job(settings, self.blobs, self.index, embedder_from(settings), self._emit, self._alive)

    async def _emit(self, event: ev.DocumentEvent) -> None:
        await retrying("appending a document event", lambda: self.producer.send(event), 30.0, on=Unavailable)

    async def _alive(self, up: ev.DocumentUploaded) -> bool:
        """The document is not deleted. No row yet is alive: the upload's own write (the gateway's, after the
        append) may land after this worker took the job."""
        rows = await retrying(
            "reading a document's status",
            lambda: self.cql.run(
                "SELECT status FROM {ks}.documents WHERE user_id = ? AND document_id = ?",
                (up.user_id, uuid.UUID(up.document_id)),
            ),
            30.0,
        )
        return not rows or rows[0].status != DELETED

    async def run(self, stop: asyncio.Event) -> None:
        log.info("document worker started", extra={"group": self.consumer.group})
        try:
            while not stop.is_set():
                deliveries = await asyncio.to_thread(self.consumer.poll, 0.5, 20)
                for delivery in deliveries:
                    if stop.is_set() or not await self._handle(delivery, stop):
                        return  # uncommitted: the next owner of the partition takes it from here
                    self.consumer.done(delivery)
        finally:
            await asyncio.to_thread(self.job.close)
            await asyncio.to_thread(self.consumer.close)
            self.producer.close(5)
            self.cql.close()

    async def _handle(self, delivery: Delivery, stop: asyncio.Event) -> bool:
        """Handle one record; False when stopped before its job ended (its offset must not be committed)."""
        event = delivery.event
        if isinstance(event, ev.DocumentDeleted):
            await self._purge(event)
            await asyncio.to_thread(self._delete_original, event.document_id)
            return True
        if not isinstance(event, ev.DocumentUploaded):
            return True  # the pipeline's own announcements
        self.consumer.hold()
        try:
            while True:
                job = asyncio.create_task(self.job.run(event))
                while not job.done():
                    await asyncio.wait({job}, timeout=1.0)
                    if stop.is_set():
                        job.cancel()  # the next owner of the partition resumes from the last page indexed
                        return False
                    await asyncio.to_thread(self.consumer.keep_alive)
                try:
                    job.result()
                    return True
                except Unavailable as exc:  # Kafka or Cassandra gone: the job is not the document's fault
                    log.warning("document job interrupted; retrying", extra={"document_id": event.document_id, "error": type(exc).__name__})  # fmt: skip
                    if stop.is_set():
                        return False
                    await asyncio.sleep(RETRY_PAUSE_S)
                except Exception:
                    log.exception("document job failed", extra={"document_id": event.document_id})
                    await self._emit(
                        ev.DocumentFailed(
                            document_id=event.document_id,
                            user_id=event.user_id,
                            trace_id=event.trace_id,
                            error_code="processing_failed",
                            error_message="the document could not be processed",
                        )
                    )
                    await self._purge(event)
                    return True
        finally:
            self.consumer.release()

    async def _purge(self, event: ev.DocumentEvent) -> None:
        """The document's index rows gone, however long Cassandra (or the owner's key) is away: a purge
        run again is harmless, and an outage must not end the process."""
        await retrying(
            "purging a document's index",
            lambda: self.index.purge(event.document_id, event.user_id),
            30.0,
            on=Unavailable,
            ids={"document_id": event.document_id},
        )

    def _delete_original(self, document_id: str) -> None:
        """The blob of a deleted document (named by its id in the store the gateway wrote it to)."""
        try:
            self.blobs.delete(self.blobs.uri_of(document_id))
        except (OSError, ValueError) as exc:
            log.warning("a deleted document's original was not removed", extra={"document_id": document_id, "error": type(exc).__name__})  # fmt: skip


async def serve(settings: DocumentSettings, kafka: KafkaSettings, cassandra: CassandraSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await DocumentWorker(settings, kafka, cassandra).run(stop)


def require_signatures(settings: DocumentSettings) -> None:
    """At start, where a deployment asks for real signatures (PARLEY_DOCUMENTS_REAL_SIGNATURES): a scanner
    with only the shipped test ones is refused, not run quietly weak."""
    if settings.real_signatures and settings.clamscan:
        missing = missing_signatures(settings.clamav_db)
        if missing:
            raise ConfigError(
                f"PARLEY_DOCUMENTS_REAL_SIGNATURES is set but PARLEY_DOCUMENTS_CLAMAV_DB={settings.clamav_db!r} has no "
                f"{' or '.join(missing)} database: run freshclam into it first (docs/operations.md, Documents)"
            )


def main() -> None:
    from parley import keys, metrics, ops, schema_registry
    from parley.logs import setup_logging

    setup_logging("documents")
    keys.install_from_env()
    settings, kafka = from_env(DocumentSettings), from_env(KafkaSettings)
    require_signatures(settings)
    schema_registry.install(kafka)
    if settings.nice:
        os.nice(settings.nice)
    if metrics.serve_from_env("documents") is not None:
        ops.register_lag(kafka, [kafka.topic_prefix + GROUP])
    asyncio.run(serve(settings, kafka, from_env(CassandraSettings)))
