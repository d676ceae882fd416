"""Import (DESIGN.md §7): ChatGPT's data export or Parley's own, appended as the conversations' events.

``POST /v1/imports`` (the owner, ``chat`` scope): the body is the export as JSON (ChatGPT's
``conversations.json``, a Parley conversation export or ``{"conversations": [...]}`` of them) or a zip holding
one (ChatGPT's whole download, Parley's account export). Each conversation becomes ConversationCreated,
MessagePosted for every kept message (the user's and the assistant's, at their original times, every branch)
and LeafSelected for the selected leaf (ConversationArchived when the file says so). No GenerationRequested:
nothing is generated, the pipeline only stores them; a reply the file holds is an assistant message whose model
is the file's.

- **Idempotent**: ids derive from the source's (``conversation_id_for``: keyed by the owner's key, so the log's
  ids confirm no guess of what was imported once the key is gone); a conversation already imported is left as
  it is, so the same file twice gives one copy. One the user deleted is never brought back under its id: it
  lands in a new one derived from the deleted id, as a resent OpenAI history does.
- **All or nothing**: the whole file is checked before anything is built (``gateway.import_formats``), and
  every event is appended in one Kafka transaction (``Services.append_atomically``): readers see all of it or
  none. Then the rows are written through for the next read, as a post's are.
- Bounded: ``PARLEY_GATEWAY_IMPORT_MAX_BYTES``, ``import_formats``'s counts and sizes, and at most
  ``IMPORTS_AT_ONCE`` imports parsing in one gateway (others get 503 ``busy`` with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import io
import logging
import uuid
import zipfile
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import BadRequest, Conflict, PayloadTooLarge, ServiceUnavailable, UnsupportedMediaType, Unprocessable
from gateway.import_formats import Imported, Refused, parse
from gateway.services import Services, services, trace_id
from gateway.validation import IMPORT_KEY_PREFIX, body_bytes, parsed_json
from parley import ids
from schemas import sealing
from schemas.events import (
    ConversationArchived,
    ConversationCreated,
    ConversationEvent,
    LeafSelected,
    MessagePosted,
    now_us,
)
from streams import tree

log = logging.getLogger(__name__)

#: Imports one gateway parses and appends at once; a file is held whole in memory while it is read.
IMPORTS_AT_ONCE = 2
#: A conversation deleted this many times over (each import after a deletion lands in a new one) is refused.
MAX_DERIVATIONS = 8
#: Conversations written through at once after the append.
WRITE_AHEAD = 4
#: The client message id prefix of imported messages (a post's key may not start so).
KEY_PREFIX = IMPORT_KEY_PREFIX

_gate = asyncio.Semaphore(IMPORTS_AT_ONCE)


@dataclass(frozen=True)
class Plan:
    source: Imported
    conversation_id: str
    events: tuple[ConversationEvent, ...]  # empty: already imported
    status: str  # imported | unchanged

    def public(self) -> dict[str, Any]:
        return {
            "id": self.conversation_id,
            "source": self.source.source,
            "source_id": self.source.source_id,
            "status": self.status,
            "messages": len(self.source.messages),
            "dropped": self.source.dropped,
        }


async def import_conversations(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    if _gate.locked():
        raise ServiceUnavailable("this gateway is busy importing; retry shortly", code="busy", retry_after=svc.settings.retry_after_s)
    async with _gate:
        document = await _document(request, svc.settings.import_max_bytes)
        try:
            conversations = await asyncio.to_thread(parse, document, now_us=now_us())
        except Refused as exc:
            raise Unprocessable(f"nothing was imported: {exc}", code=exc.code) from None
        del document
        plans = [await plan(svc, user.user_id, c, trace_id(request)) for c in conversations]
        events = [e for p in plans for e in p.events]
        if events:
            await svc.append_atomically(events)
        gate = asyncio.Semaphore(WRITE_AHEAD)

        async def written(one: Plan) -> None:
            async with gate:
                await write_through(svc, one)

        await asyncio.gather(*(written(p) for p in plans if p.events))
    body = {
        "imported": sum(p.status == "imported" for p in plans),
        "unchanged": sum(p.status == "unchanged" for p in plans),
        "conversations": [p.public() for p in plans],
    }
    log.info("import", extra={"user_id": user.user_id, "imported": body["imported"], "unchanged": body["unchanged"], "events": len(events)})
    return JSONResponse(body, status_code=201 if body["imported"] else 200)


def conversation_id_for(user_id: str, source: str, source_id: str) -> str:
    """The conversation a source conversation is imported as: the same on every import of it by this user."""
    return str(uuid.uuid5(ids.NS, KEY_PREFIX + sealing.blind(user_id, f"import:{source}:{source_id}")))


def after_deletion(conversation_id: str) -> str:
    return str(uuid.uuid5(ids.NS, "import-after-deletion:" + conversation_id))


async def plan(svc: Services, user_id: str, c: Imported, trace: str) -> Plan:
    """What importing ``c`` for ``user_id`` appends: its events, or none when this user has it already."""
    cid = conversation_id_for(user_id, c.source, c.source_id)
    for _ in range(MAX_DERIVATIONS):
        existing = await svc.store.conversation(cid)
        if existing is not None:
            if existing.user_id != user_id:  # derived under this user's key: only a bug gets here
                raise Conflict("an imported conversation's id is taken", code="conflict")
            return Plan(c, cid, (), "unchanged")
        if not await svc.store.deleted(cid):
            return Plan(c, cid, tuple(events_for(user_id, cid, c, trace)), "imported")
        cid = after_deletion(cid)
    raise Conflict("this conversation was imported and deleted too many times", code="deleted")


def events_for(user_id: str, cid: str, c: Imported, trace: str) -> list[ConversationEvent]:
    """The events of one imported conversation, at the file's times; event ids derived like the rest, so a
    second append of the same import is the same events."""
    common = {"conversation_id": cid, "user_id": user_id, "trace_id": trace}

    def event_id(part: str) -> str:
        return str(uuid.uuid5(ids.NS, f"{cid}:{KEY_PREFIX}{part}"))

    message_ids = {m.source_id: ids.user_message_id(cid, KEY_PREFIX + m.source_id) for m in c.messages}
    out: list[ConversationEvent] = [
        ConversationCreated(**common, event_id=event_id("created"), occurred_at=c.created_us, title=c.title)
    ]
    for m in c.messages:
        out.append(
            MessagePosted(
                **common,
                event_id=event_id(f"message:{m.source_id}"),
                occurred_at=m.created_us,
                message_id=message_ids[m.source_id],
                parent_id=message_ids[m.parent_source_id] if m.parent_source_id is not None else None,
                client_message_id=KEY_PREFIX + m.source_id,
                role=m.role,
                content=m.content,
                model=m.model,
            )
        )
    last = max(c.updated_us, c.created_us) + 1  # after every post: the file's leaf, not the last post's, is selected
    if c.leaf_source_id is not None:
        out.append(LeafSelected(**common, event_id=event_id("leaf"), occurred_at=last, leaf_id=message_ids[c.leaf_source_id]))
    if c.archived:
        out.append(ConversationArchived(**common, event_id=event_id("archived"), occurred_at=last + 1, archived=True))
    return out


async def write_through(svc: Services, planned: Plan) -> None:
    """The rows, as the materializer will write them, in the log's order (each event over the state before it)."""
    state = tree.empty(planned.conversation_id)
    for event in planned.events:
        await svc.write_through(event, state=state)
        state = tree.apply(state, event)


async def _document(request: Request, max_bytes: int) -> Any:
    """The export: JSON, or a zip holding it. Read whole (bounded), parsed on a thread."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in ("application/json", "application/zip", ""):
        raise UnsupportedMediaType("send the export as application/json or application/zip")
    data = await body_bytes(request, max_bytes, f"an import is at most {max_bytes} bytes; import the export in parts")
    if not data:
        raise BadRequest("send the export as the body")
    if media == "application/zip":
        return await asyncio.to_thread(_unzipped, data, max_bytes)
    return await asyncio.to_thread(parsed_json, data)


def _unzipped(data: bytes, max_bytes: int) -> Any:
    """ChatGPT's download (``conversations.json`` anywhere in it) or Parley's account export (its
    ``conversations/*.json``). Members are read up to ``max_bytes`` in all, whatever their headers claim."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise BadRequest("the body is not a readable zip file") from None
    chatgpt = [n for n in names if n.rsplit("/", 1)[-1] == "conversations.json"]
    parley = sorted(n for n in names if "/conversations/" in f"/{n}" and n.endswith(".json"))
    if len(chatgpt) == 1:
        return parsed_json(_read(archive, chatgpt[0], max_bytes))
    if chatgpt or not parley:
        raise Unprocessable(
            "the zip holds neither one conversations.json (ChatGPT's export) nor Parley's conversations/", code="unknown_format"
        )
    budget = max_bytes
    out = []
    for name in parley:
        raw = _read(archive, name, budget)
        budget -= len(raw)
        out.append(parsed_json(raw))
    return {"conversations": out}


def _read(archive: zipfile.ZipFile, name: str, budget: int) -> bytes:
    """One member, refused past ``budget`` bytes as it inflates (a zip bomb declares a small size)."""
    out = bytearray()
    try:
        with archive.open(name) as member:
            while chunk := member.read(1 << 16):
                out += chunk
                if len(out) > budget:
                    raise PayloadTooLarge("the zip's contents are too large to import; import the export in parts")
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, RuntimeError):  # corrupt, encrypted, bad CRC
        raise BadRequest("a file in the zip cannot be read") from None
    return bytes(out)
