"""The documents rows: each event sets only its cells, at its own time, so the newest event wins in any order."""

from __future__ import annotations

from schemas import sealing

from schemas import events as ev
from streams.document_status import statements_for

D, C = "00000000-0000-0000-0000-00000000000d", "00000000-0000-0000-0000-00000000000c"


def test_an_upload_writes_processing_and_its_attachment_at_the_events_time() -> None:
    up = ev.DocumentUploaded(document_id=D, user_id="u", conversation_id=C, filename="a.pdf", media_type="application/pdf",
                             size_bytes=3, sha256="x", storage_uri="file:///x", occurred_at=1000)  # fmt: skip
    first, attached = statements_for(up, sealing.sealer())
    assert "status = ?" in first.cql and first.values[0] == 1000 and "processing" in first.values
    assert "documents_by_conversation" in attached.cql


def test_a_page_batch_moves_only_the_ready_mark_and_a_delete_is_a_mark_at_its_time() -> None:
    (batch,) = statements_for(ev.DocumentPagesExtracted(document_id=D, user_id="u", pages=4, first_page=5, last_page=8, pages_total=20), sealing.sealer())
    assert "status" not in batch.cql and "pages_ready = ?" in batch.cql and 8 in batch.values
    mark, detached = statements_for(ev.DocumentDeleted(document_id=D, user_id="u", conversation_id=C, occurred_at=5), sealing.sealer())
    assert mark.cql.startswith("UPDATE") and "deleted" in mark.values and "filename = ?" in mark.cql
    assert detached.cql.startswith("DELETE FROM {ks}.documents_by_conversation")
    assert mark.values[0] == detached.values[0] == 5


def test_events_of_other_topics_write_nothing() -> None:
    assert statements_for(ev.LeafSelected(conversation_id=C, user_id="u", leaf_id=D), sealing.sealer()) == []
