"""Share links (DESIGN.md §7, shares): a read-only snapshot of one branch at a link anyone holding it may open.

- ``POST /v1/conversations/{id}/shares {expires_in_days?}`` (the owner): a link to the branch selected now, the
  messages from the root to its leaf; later turns are not in it. ConversationShared on ``chat.events``.
- ``GET /v1/conversations/{id}/shares`` (the owner): the live links, each with its path to copy again.
- ``DELETE /v1/conversations/{id}/shares/{share_id}`` (the owner): ShareRevoked; the link answers 404 at once.
- ``GET /v1/shares/{secret}`` (anyone, no credential): the title and the branch's messages. 404, the same for
  every reason, when the link is unknown, revoked, expired, its conversation deleted or its owner erased.
- ``POST /v1/shares/{secret}/fork`` (any signed-in user): "continue in my account": the branch imported as a
  new conversation of the caller's (``gateway.imports``: one Kafka transaction; the same link twice is the same
  conversation).
- ``GET /s/{secret}``: the page that shows it (``static/share.html``), under the same Content-Security-Policy.

The link's secret is 256 random bits; the log and the rows key a share by its SHA-256, and keep the secret
itself only sealed under the owner's key (for the owner's list), so neither the log nor a copy of the tables
opens a link, and an erasure ends every one.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from gateway.errors import NotFound, Unprocessable
from gateway.import_formats import Imported, ImportedMessage
from gateway.imports import plan, write_through
from gateway.services import Services, services, trace_id
from gateway.store import ConversationRow, MessageRow, ShareRow
from gateway.validation import json_body, only
from schemas.events import ConversationShared, ShareRevoked, now_us
from streams import tree
from streams.projection import from_time

#: A link's secret: ``secrets.token_urlsafe(32)``, 43 characters of the URL-safe alphabet.
SECRET = re.compile(r"[A-Za-z0-9_-]{43}")
MAX_DAYS = 365
STATIC = Path(__file__).parent / "static"
#: What a link's answers carry: never cached (a revocation holds at once), never indexed.
PRIVATE = {"Cache-Control": "no-store", "X-Robots-Tag": "noindex, nofollow"}
GONE = "this link does not exist, or no longer works"


def share_id_of(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


async def create_share(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes, required=False)
    only(body, {"expires_in_days"}, "a share")
    days = body.get("expires_in_days")
    if days is not None and (isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS):
        raise Unprocessable(f"`expires_in_days` is a whole number from 1 to {MAX_DAYS}, or null: never", code="invalid_expiry")
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    leaf = next((m for m in await svc.store.tree(conversation.id) if m.id == conversation.selected_leaf_id), None)
    if leaf is None:  # a reply still being written is shared as it will end: the link reads the rows
        raise Unprocessable("the conversation has no message to share yet", code="empty_conversation")
    secret, now = secrets.token_urlsafe(32), now_us()
    event = ConversationShared(
        conversation_id=conversation.id, user_id=user.user_id, share_id=share_id_of(secret), secret=secret, leaf_id=leaf.id,
        expires_at=now + days * 86_400_000_000 if days else 0, occurred_at=now, trace_id=trace_id(request),
    )  # fmt: skip
    await svc.append(event)
    await svc.write_through(event, state=_with_leaf(conversation, leaf.id))
    row = ShareRow(event.share_id, conversation.id, user.user_id, leaf.id, _time(now), _time(event.expires_at), None, secret)
    return JSONResponse(_share_json(row), status_code=201)


async def list_shares(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    now = datetime.now(timezone.utc)
    return JSONResponse({"shares": [_share_json(s) for s in await svc.store.shares_of(conversation) if s.live(now)]})


async def revoke_share(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    share_id = request.path_params["share_id"]
    share = next((s for s in await svc.store.shares_of(conversation) if s.id == share_id and s.revoked_at is None), None)
    if share is None:
        raise NotFound("no live share of that id in this conversation", code="share_not_found")
    event = ShareRevoked(conversation_id=conversation.id, user_id=user.user_id, share_id=share.id, trace_id=trace_id(request))
    await svc.append(event)
    await svc.write_through(event, state=_with_leaf(conversation, share.leaf_id))
    return Response(status_code=204)


async def view_share(request: Request) -> Response:
    """Public: what the link shows. Nothing of the caller is read; every refusal is the same 404."""
    svc = services(request)
    share, conversation, branch = await _shared(svc, request.path_params["secret"])
    body = {
        "title": conversation.title,
        "shared_at": _iso(share.created_at),
        "expires_at": _iso(share.expires_at),
        "messages": [
            {"role": m.role, "content": m.content, "model": m.model, "created_at": _iso(m.created_at)} for m in branch
        ],
    }
    return JSONResponse(body, headers=PRIVATE)


async def fork_share(request: Request) -> Response:
    """The branch as a new conversation of the caller's, at its messages' own times."""
    svc = services(request)
    user = await svc.auth(request)
    share, conversation, branch = await _shared(svc, request.path_params["secret"])
    messages, parent, floor = [], None, 0
    for m in branch:
        at = max(from_time(m.created_at) or 0, floor + 1)
        messages.append(ImportedMessage(m.id, parent, m.role, m.content, at, m.model if m.role == "assistant" else None))
        parent, floor = m.id, at
    source = Imported(
        "share", share.id, conversation.title, now_us(), False, tuple(messages), parent, updated_us=floor,
    )  # fmt: skip
    planned = await plan(svc, user.user_id, source, trace_id(request))
    if planned.events:
        await svc.append_atomically(list(planned.events))
        await write_through(svc, planned)
    return JSONResponse({"id": planned.conversation_id, "status": planned.status}, status_code=201 if planned.events else 200)


async def share_page(request: Request) -> Response:
    """The page a link opens (it reads ``GET /v1/shares/{secret}``); 404 with the same page when it does not work."""
    svc = services(request)
    try:
        await _shared(svc, request.path_params["secret"])
        status = 200
    except NotFound:
        status = 404
    return FileResponse(STATIC / "share.html", status_code=status, headers=PRIVATE)


async def _shared(svc: Services, secret: str) -> tuple[ShareRow, ConversationRow, list[MessageRow]]:
    """The share, its conversation and the branch it shows, or NotFound (one answer for every reason)."""
    share = await svc.store.share(share_id_of(secret)) if SECRET.fullmatch(secret) else None
    if share is None or not share.live(datetime.now(timezone.utc)):
        raise NotFound(GONE, code="share_not_found")
    conversation = await svc.store.conversation(share.conversation_id)  # None once deleted
    owner = await svc.directory.user(share.user_id) if conversation is not None else None
    if conversation is None or conversation.user_id != share.user_id or owner is None or owner.erased:
        raise NotFound(GONE, code="share_not_found")
    if svc.keys is not None:
        await svc.keys.prefetch([share.user_id])  # the visitor is anyone: the owner's key opens the text
    by_id = {m.id: m for m in await svc.store.messages(conversation.id)}
    branch: list[MessageRow] = []
    current: str | None = share.leaf_id
    while current is not None and current in by_id and len(branch) <= len(by_id):
        branch.append(by_id[current])
        current = by_id[current].parent_id
    shown = [m for m in reversed(branch) if m.role in ("user", "assistant") and m.content]
    if not shown:
        raise NotFound(GONE, code="share_not_found")
    return share, conversation, shown


def _with_leaf(conversation: ConversationRow, leaf_id: str) -> tree.Conversation:
    """What the projection needs to write a share: the owner, and that the branch's leaf is known."""
    state = tree.Conversation(conversation_id=conversation.id, user_id=conversation.user_id, created_at=from_time(conversation.created_at))
    return state.with_message(tree.Message(leaf_id, None, "assistant"))


def _share_json(s: ShareRow) -> dict[str, Any]:
    return {"id": s.id, "path": f"/s/{s.secret}", "leaf_id": s.leaf_id, "created_at": _iso(s.created_at), "expires_at": _iso(s.expires_at)}


def _time(us: int) -> datetime | None:
    return datetime.fromtimestamp(us / 1e6, tz=timezone.utc) if us else None


def _iso(value: datetime | None) -> str | None:
    return value.replace(tzinfo=timezone.utc).isoformat() if value else None
