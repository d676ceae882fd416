"""The ``documents`` rows: each document's status, folded from ``docs.events``.

Pure (as ``streams.projection``, sealing with the ``Sealer`` it is handed): an event → the statements that project it. The materializer runs them
from the log; the gateway runs the same ones at upload and delete (its
write-through), so the two writes are one.

Every statement carries its event's time as ``USING TIMESTAMP``, and each
event sets only the cells it knows, so the newest event wins whatever order
the writes land in: a later batch of pages moves ``pages_ready`` forward, a
repeated old one changes nothing. A delete sets ``status = deleted`` (and
blanks the name and the blob's address); a page batch the worker finished
after it (it stops at its next check) moves only ``pages_ready``. Readers
show rows whose status is in ``VISIBLE``.
"""

from __future__ import annotations

import uuid

from documents.status import DELETED, FAILED, PROCESSING, READY
from schemas import events as ev
from schemas import sealing
from streams.memory import Statement
from streams.projection import to_time

_GONE = None  # a null cell: _update writes every cell it is given, None included

_SET = "UPDATE {ks}.documents USING TIMESTAMP ? SET %s WHERE user_id = ? AND document_id = ?"


def _update(event: ev.DocumentEvent, **cells: object) -> Statement:
    names = [*cells, "updated_at"]
    values = (*cells.values(), to_time(event.occurred_at))
    return Statement(
        _SET % ", ".join(f"{n} = ?" for n in names),
        (event.occurred_at, *values, event.user_id, uuid.UUID(event.document_id)),
    )


def statements_for(event: ev.Event, sealer: sealing.Sealer) -> list[Statement]:
    """What ``event`` writes (the file's name sealed with ``sealer``); nothing for events of other topics."""
    if isinstance(event, ev.DocumentUploaded):
        out = [
            _update(
                event,
                conversation_id=uuid.UUID(event.conversation_id) if event.conversation_id else None,
                filename=sealer.seal(
                    event.user_id, event.filename, at=sealing.cell_at("documents", "filename", uuid.UUID(event.document_id)), deterministic=True
                ),
                media_type=event.media_type,
                size_bytes=event.size_bytes,
                sha256=event.sha256,
                storage_uri=event.storage_uri,
                status=PROCESSING,
                created_at=to_time(event.occurred_at),
            )
        ]
        if event.conversation_id:
            out.append(_attached(event, event.conversation_id))
        return out
    if isinstance(event, ev.DocumentPagesExtracted):
        return [_update(event, pages_ready=event.last_page, pages_total=event.pages_total)]
    if isinstance(event, ev.DocumentIndexed):
        return [
            _update(
                event,
                status=READY,
                pages_ready=event.pages_total,
                pages_total=event.pages_total,
                ocr_pages=event.ocr_pages,
                chunks=event.chunks,
                embedding_model=event.embedding_model,
            )
        ]
    if isinstance(event, ev.DocumentFailed):
        return [_update(event, status=FAILED, error_code=event.error_code, error_message=event.error_message)]
    if isinstance(event, ev.DocumentDeleted):
        # A mark, not a row tombstone: "deleted" is then told apart from "not written yet" (the worker may take
        # the upload before the gateway's write-through lands), and cells a late page batch writes cannot bring
        # the document back. What named it goes with the mark.
        out = [
            _update(event, status=DELETED, filename=_GONE, sha256=_GONE, storage_uri=_GONE, error_message=_GONE)
        ]
        if event.conversation_id:
            out.append(
                Statement(
                    "DELETE FROM {ks}.documents_by_conversation USING TIMESTAMP ? WHERE conversation_id = ? AND document_id = ?",
                    (event.occurred_at, uuid.UUID(event.conversation_id), uuid.UUID(event.document_id)),
                )
            )
        return out
    return []


def _attached(event: ev.DocumentUploaded, conversation_id: str) -> Statement:
    return Statement(
        "UPDATE {ks}.documents_by_conversation USING TIMESTAMP ? SET user_id = ? WHERE conversation_id = ? AND document_id = ?",
        (event.occurred_at, event.user_id, uuid.UUID(conversation_id), uuid.UUID(event.document_id)),
    )
