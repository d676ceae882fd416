"""Document handlers: upload, list, status, a page's text, delete (docs/design.md §10).

An upload is checked here only as far as is cheap and certain: its size, and
its type from its content (``documents.sniff``), so a wrong file gets its 4xx
at once. Everything slow or deep (the virus scan, active content, macros,
bombs, extraction) is the document worker's, off the chat path; a file it
refuses ends ``failed`` with the reason in ``error``. The original goes to the
blob store before ``DocumentUploaded`` is appended, so the worker always finds
it. Another user's document is a 404 on every path, as a conversation is.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from documents.blobs import original_at
from documents.errors import Refused
from documents.sniff import sniff
from gateway.errors import ApiError, BadRequest, NotFound, PayloadTooLarge, UnsupportedMediaType, Unprocessable
from gateway.services import Services, services, trace_id
from gateway.store import DocumentRow
from gateway.validation import uuid_string
from schemas import sealing
from schemas.events import DocumentDeleted, DocumentUploaded

#: Multipart framing around the file: boundaries, part headers, a conversation id.
FORM_OVERHEAD = 64 * 1024
FILENAME_MAX = 255

#: How the gateway answers what ``documents.sniff`` refuses.
_REFUSED_STATUS = {"empty_file": 422, "unsupported_type": 415, "type_mismatch": 415}


def refused(exc: Refused) -> ApiError:
    return ApiError(exc.message, code=exc.code, status=_REFUSED_STATUS.get(exc.code, 422))


async def _owned(svc: Services, request: Request) -> DocumentRow:
    user = await svc.auth(request)
    found = await svc.store.document(user.user_id, request.path_params["document_id"])
    if found is None:
        raise NotFound("no such document", code="document_not_found")
    return found


async def upload(request: Request) -> Response:
    """``POST /v1/documents``: multipart, the file in ``file``, optionally ``conversation_id`` to attach it."""
    svc = services(request)
    user = await svc.auth(request)
    limit = svc.documents.settings.max_bytes
    declared = request.headers.get("content-length", "")
    if not (declared.isascii() and declared.isdigit()):
        raise ApiError("send the upload with a Content-Length", code="length_required", status=411)
    if int(declared) > limit + FORM_OVERHEAD:
        raise PayloadTooLarge(f"the file is over the {limit} byte limit", code="too_large")
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
        raise UnsupportedMediaType("send the file as multipart/form-data, in the field `file`")
    form = await request.form(max_files=1, max_fields=4)
    try:
        unknown = sorted(set(form) - {"file", "conversation_id"})
        if unknown:
            raise Unprocessable(f"`{unknown[0]}` is not a field of an upload; send file and conversation_id", code="unknown_field")
        upload_file = form.get("file")
        if not isinstance(upload_file, UploadFile):
            raise Unprocessable("the file goes in the multipart field `file`", code="missing_file")
        if len(form.getlist("conversation_id")) > 1 or len(form.getlist("file")) > 1:
            raise Unprocessable("send `file` and `conversation_id` once each", code="repeated_field")
        conversation_id = form.get("conversation_id") or None
        if conversation_id is not None:
            conversation_id = uuid_string(conversation_id, "conversation_id")
            await svc.owned(user, conversation_id)
        data = await upload_file.read()
        filename = (upload_file.filename or "upload").replace("/", "_").replace("\\", "_")[:FILENAME_MAX]
        declared_type = upload_file.content_type
    finally:
        await form.close()
    if len(data) > limit:
        raise PayloadTooLarge(f"the file is over the {limit} byte limit", code="too_large")
    await svc.quotas.check_upload(user, len(data))  # 429 past the tier's documents or bytes of the day
    document_id = str(uuid.uuid4())

    def store() -> tuple[str, str, str]:
        # Up to 25 MB of zip parsing, SHA-256 and AES-GCM: off the loop that feeds every SSE stream.
        media_type = sniff(data, filename, declared_type)
        uri = svc.documents.blobs.put(document_id, sealing.seal_bytes(user.user_id, data, at=original_at(document_id)))
        return media_type, uri, content_hash(user.user_id, data, sealing.sealer())

    try:
        media_type, uri, sha256 = await asyncio.to_thread(store)
    except Refused as exc:
        raise refused(exc) from None
    event = DocumentUploaded(
        document_id=document_id,
        user_id=user.user_id,
        trace_id=trace_id(request),
        conversation_id=conversation_id,
        filename=filename,
        media_type=media_type,
        size_bytes=len(data),
        sha256=sha256,
        storage_uri=uri,
    )
    await svc.append(event)
    await svc.write_document(event)
    return JSONResponse(DocumentRow.uploaded(event).public(), status_code=202)


def content_hash(user_id: str, data: bytes, sealer: sealing.Sealer) -> str:
    """``DocumentUploaded.sha256``: the file's SHA-256 keyed by the owner's key (``Sealer.blind``). An
    unkeyed hash on a topic kept for good would prove, after an erasure, who uploaded a known file."""
    return sealer.blind(user_id, "document-sha256:" + hashlib.sha256(data).hexdigest())


async def list_documents(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    rows = await svc.store.documents_of(user.user_id)
    return JSONResponse({"object": "list", "data": [r.public() for r in rows]})


async def get_document(request: Request) -> Response:
    svc = services(request)
    return JSONResponse((await _owned(svc, request)).public())


async def get_page(request: Request) -> Response:
    """A page's text, for a citation. Only pages the document has made searchable are served."""
    svc = services(request)
    document = await _owned(svc, request)
    raw = request.path_params["page"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise BadRequest("pages are numbered from 1", code="bad_page")
    number = int(raw)
    if document.status == "failed":
        raise NotFound("the document failed; it has no pages", code="document_failed")
    if document.pages_total and number > document.pages_total:
        raise NotFound(f"the document has {document.pages_total} pages", code="page_not_found")
    if number > document.pages_ready:
        raise NotFound(
            f"page {number} is not indexed yet ({document.pages_ready} of {document.pages_total or '?'} ready)",
            code="page_not_ready",
        )
    page = await svc.documents.index.page(document.id, number)
    if page is None:
        raise NotFound("no such page", code="page_not_found")
    return JSONResponse(
        {"document_id": document.id, "filename": document.filename, "page": number, "text": page.text, "method": page.method}
    )


async def delete_document(request: Request) -> Response:
    """Gone from every read at once; the worker stops processing it and removes its index and original."""
    svc = services(request)
    document = await _owned(svc, request)
    event = DocumentDeleted(
        document_id=document.id,
        user_id=document.user_id,
        trace_id=trace_id(request),
        conversation_id=document.conversation_id,
    )
    await svc.append(event)
    await svc.write_document(event)
    return JSONResponse({"id": document.id, "object": "document", "deleted": True})
