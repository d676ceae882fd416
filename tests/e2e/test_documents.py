"""Documents through the whole stack: upload, the document worker (real extraction, OCR, ClamAV), the index in
Cassandra, retrieval in the context builder, citations on the reply. Real Kafka, real Cassandra, real processes."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from schemas.events import InferenceRequested
from tests.e2e.fleet import read_all
from tests.fixtures import documents as fx
from tools.client import ApiError
from tools.topology import DOCUMENTS

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

#: A report whose facts each sit on one known page.
REPORT = [
    "Annual report of the Halden Ferry Company. This report covers the company's ferries, crews and routes.",
    "Fleet. The company operates eleven ferries. The newest vessel, the MV Solvik, entered service in March.",
    "Finances. Ticket revenue rose to 38 million kroner. Fuel costs fell by nine percent after the switch to batteries.",
    "Safety. No serious incidents were reported. Every crew member completed the annual evacuation drill.",
    *(
        f"Timetable {n}. Departures on route {n} leave every {20 + n} minutes from the north quay, weather permitting."
        for n in range(1, 9)
    ),
]


def _bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


async def _ready(client, document_id: str) -> dict:
    found = await client.until_processed(document_id)
    assert found["status"] == "ready", found
    return found


async def _materialized(client, cid: str) -> dict:
    """The conversation once the materializer has written its reply's completion (it runs beside the stream)."""
    deadline = time.monotonic() + 30
    while True:
        stored = await client.conversation(cid)
        if any(m["role"] == "assistant" and "retrieval" in m for m in stored["messages"]):
            return stored
        assert time.monotonic() < deadline, "the reply's completion was not materialized"
        await asyncio.sleep(0.2)


def _requests(stack, request_ids: set[str]) -> dict[str, InferenceRequested]:
    events = read_all(
        stack.kafka,
        "chat.inference",
        lambda evs: request_ids <= {e.request_id for e in evs if isinstance(e, InferenceRequested)},
        "the turns' prompts",
    )
    return {e.request_id: e for e in events if isinstance(e, InferenceRequested) and e.request_id in request_ids}


async def test_a_text_pdf_is_indexed_page_by_page_and_a_question_retrieves_its_page(stack) -> None:
    client = stack.client()
    try:
        cid = await client.create_conversation("ferries")
        uploaded = await client.upload("halden.pdf", fx.text_pdf(REPORT), PDF, conversation_id=cid)
        assert uploaded["status"] == "processing" and uploaded["media_type"] == PDF
        doc = await _ready(client, uploaded["id"])
        assert (doc["pages_total"], doc["pages_ready"], doc["chunks"] > 0) == (12, 12, True)

        page = await client._json("GET", f"/v1/documents/{doc['id']}/pages/3")
        assert "38 million kroner" in page["text"] and page["method"] == "text"
        listed = await client._json("GET", "/v1/documents")
        assert doc["id"] in [d["id"] for d in listed["data"]]

        # Attached to the conversation: a message that names nothing still uses it.
        reply = await client.send(cid, "How much did ticket revenue rise to, in kroner?")
        done = reply.events[-1]
        assert done.event == "done", reply.events
        assert done.data["citation_status"] in ("cited", "uncited")
        stored = await _materialized(client, cid)
        user_message = next(m for m in stored["messages"] if m["role"] == "user")
        assert user_message["document_ids"] == [doc["id"]]
        answer = next(m for m in stored["messages"] if m["role"] == "assistant")
        assert answer["citation_status"] == done.data["citation_status"]
        assert answer["retrieval"]["path"] == "hybrid"
        assert answer["retrieval"]["documents"][0]["pages_ready"] == 12

        prompt = _requests(stack, {answer["id"]})[answer["id"]]
        assert prompt.retrieval is not None and prompt.retrieval.path == "hybrid"
        assert 3 in [p.page for p in prompt.retrieval.passages]  # 5 passages of 12 pages: the answer's is among them
        shown = "\n".join(m.content for m in prompt.messages)
        assert "[halden.pdf p.3]" in shown and "not instructions" in shown
    finally:
        await client.close()


@pytest.mark.parametrize(
    "name, make, media_type, page, words",
    [
        ("scan.pdf", lambda: fx.scanned_pdf(["Nothing here but a cover page.", "The lighthouse keeper is named Ingrid Moe."]), PDF, 2, "lighthouse"),
        ("minutes.docx", lambda: fx.docx_with_table(), DOCX, 2, None),  # the table is after a page break
        ("page.html", lambda: _bytes(fx.html_page()), "text/html", 1, None),
    ],
)
async def test_scanned_pdfs_docx_tables_and_html_are_searchable(stack, name, make, media_type, page, words) -> None:
    client = stack.client()
    try:
        doc = await _ready(client, (await client.upload(name, make(), media_type))["id"])
        text = (await client._json("GET", f"/v1/documents/{doc['id']}/pages/{page}"))["text"]
        if name.endswith(".pdf"):
            assert doc["ocr_pages"] == 2 and words in text.lower()
        if name.endswith(".docx"):
            assert "|" in text and "---" in text  # the table came through as a table
        assert doc["chunks"] > 0
    finally:
        await client.close()


@pytest.mark.parametrize(
    "name, make, declared, status, code",
    [
        ("empty.pdf", fx.empty, PDF, 422, "empty_file"),
        ("lies.pdf", lambda: fx.lying_file()[0], PDF, 415, "type_mismatch"),
    ],
)
async def test_files_refused_at_upload_get_a_clear_error(stack, name, make, declared, status, code) -> None:
    client = stack.client()
    try:
        with pytest.raises(ApiError) as refused:
            await client.upload(name, make(), declared)
        assert refused.value.status == status and refused.value.body["error"]["code"] == code
    finally:
        await client.close()


@pytest.mark.parametrize(
    "name, make, declared, code",
    [
        ("eicar.txt", fx.eicar, "text/plain", "malware_detected"),
        ("script.pdf", fx.pdf_with_javascript, PDF, "active_content"),
        ("bomb.docx", fx.zip_bomb_docx, DOCX, "decompression_bomb"),
        ("macros.docx", fx.docx_with_macros, DOCX, "macros"),
        ("blank.pdf", lambda: fx.scanned_pdf([""]), PDF, "no_text"),
    ],
)
async def test_poisoned_files_end_failed_with_their_reason_and_nothing_served(stack, name, make, declared, code) -> None:
    client = stack.client()
    try:
        doc = await client.until_processed((await client.upload(name, make(), declared))["id"])
        assert doc["status"] == "failed" and doc["error"]["code"] == code, doc
        with pytest.raises(ApiError) as gone:
            await client._json("GET", f"/v1/documents/{doc['id']}/pages/1")
        assert gone.value.status == 404
        rows = stack.inner.session.execute(
            "SELECT chunk_id FROM document_chunks WHERE document_id = %s", (uuid.UUID(doc["id"]),)
        ).all()
        assert rows == []
        cid = await client.create_conversation()
        with pytest.raises(ApiError) as refused:
            await client.send(cid, "what is in it?", document_ids=[doc["id"]])
        assert refused.value.status == 422 and refused.value.body["error"]["code"] == "document_failed"
    finally:
        await client.close()


async def test_another_users_document_is_a_404_everywhere(stack) -> None:
    owner, other = stack.client(), stack.client(stack.new_key())
    try:
        doc = await _ready(owner, (await owner.upload("halden.pdf", fx.text_pdf(REPORT), PDF))["id"])
        for path in (f"/v1/documents/{doc['id']}", f"/v1/documents/{doc['id']}/pages/1"):
            with pytest.raises(ApiError) as hidden:
                await other._json("GET", path)
            assert hidden.value.status == 404
        with pytest.raises(ApiError) as hidden:
            await other._json("DELETE", f"/v1/documents/{doc['id']}")
        assert hidden.value.status == 404
        assert doc["id"] not in [d["id"] for d in (await other._json("GET", "/v1/documents"))["data"]]
        cid = await other.create_conversation()
        with pytest.raises(ApiError) as hidden:
            await other.send(cid, "what does it say?", document_ids=[doc["id"]])
        assert hidden.value.status == 404 and hidden.value.body["error"]["code"] == "document_not_found"
    finally:
        await owner.close()
        await other.close()


async def test_deleting_a_document_removes_it_and_its_index(stack) -> None:
    client = stack.client()
    try:
        doc = await _ready(client, (await client.upload("halden.pdf", fx.text_pdf(REPORT), PDF))["id"])
        await client._json("DELETE", f"/v1/documents/{doc['id']}")
        with pytest.raises(ApiError) as gone:
            await client.document(doc["id"])
        assert gone.value.status == 404
        deadline = time.monotonic() + 60
        while stack.inner.session.execute(
            "SELECT chunk_id FROM document_chunks WHERE document_id = %s LIMIT 1", (uuid.UUID(doc["id"]),)
        ).all():
            assert time.monotonic() < deadline, "the index of a deleted document was not purged"
            await asyncio.sleep(0.3)
    finally:
        await client.close()


async def test_a_document_worker_killed_mid_document_is_followed_by_one_that_finishes_it(stack) -> None:
    """OCR pages are slow enough to kill the worker between them; the next worker resumes at the first page
    the index does not hold whole, and no chunk is written twice."""
    client = stack.client()
    supervisor = stack.inner.supervisor
    pages = [f"Page {n}. The harbour master logs ship number {n * 7} arriving at dawn." for n in range(1, 9)]
    try:
        doc_id = (await client.upload("log.pdf", fx.scanned_pdf(pages), PDF))["id"]
        deadline = time.monotonic() + 120
        while (await client.document(doc_id))["pages_ready"] < 1:
            assert time.monotonic() < deadline, "no page was indexed"
            await asyncio.sleep(0.2)
        worker = next(c for c in supervisor.children if c.service.name == DOCUMENTS.name and c.process.poll() is None)
        worker.process.kill()
        worker.process.wait(30)
        killed_at = (await client.document(doc_id))["pages_ready"]
        assert killed_at < len(pages), "the document finished before the kill: make it longer"
        supervisor.start(DOCUMENTS, name=f"documents-{uuid.uuid4().hex[:4]}")
        doc = await _ready(client, doc_id)
        assert (doc["pages_total"], doc["pages_ready"], doc["ocr_pages"]) == (8, 8, 8)
        rows = stack.inner.session.execute(
            "SELECT chunk_id, page, ordinal FROM document_chunks WHERE document_id = %s", (uuid.UUID(doc_id),)
        ).all()
        assert len(rows) == doc["chunks"] == len({(r.page, r.ordinal) for r in rows})
        assert sorted({r.page for r in rows}) == list(range(1, 9))
    finally:
        await client.close()
