"""Export (DESIGN.md §7): one conversation, the whole tree, as JSON or Markdown, and the caller's whole account as
a zip of JSON (the right of access).

- ``GET /v1/conversations/{id}/export?format=json|markdown`` (the owner, ``chat``): every message of every
  branch, with its parent, so the tree and the selected branch can be rebuilt; Markdown for people: the tree
  depth first, each alternative labelled "version k of n".
- ``GET /v1/me/export`` (the caller on the web session, ``account``: a key is for chatting, not for taking the
  whole account away): ``profile.json``, ``memory.json``, ``documents.json`` (what was uploaded, not the
  files) and ``conversations/<id>.json`` for every conversation not deleted, archived ones too.

Reads only, from the rows the materializer keeps; nothing is logged of what is exported, and file names carry
ids, never titles (a title is the user's text).
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin import caller
from gateway.conversations import message_json
from gateway.errors import Unprocessable
from gateway.services import services
from gateway.store import ConversationRow, MessageRow
from parley.users import ACCOUNT

FORMAT = "parley.conversation/1"
#: Conversations of one account read at once for its export.
READ_AHEAD = 8


def conversation_json(conversation: ConversationRow, messages: Sequence[MessageRow]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "id": conversation.id,
        "title": conversation.title,
        "created_at": _iso(conversation.created_at),
        "archived": conversation.archived,
        "selected_leaf_id": conversation.selected_leaf_id,
        "messages": [message_json(m) for m in messages],
    }


def markdown(doc: dict[str, Any]) -> str:
    """The tree depth first, children in the order they were written; a message with siblings is labelled with
    its version, so every branch is there and each reads in order."""
    children: dict[str | None, list[dict[str, Any]]] = {}
    known = {m["id"] for m in doc["messages"]}
    for m in doc["messages"]:  # already oldest first
        children.setdefault(m["parent_id"] if m["parent_id"] in known else None, []).append(m)
    selected = _branch(doc["messages"], doc.get("selected_leaf_id"))
    lines = [f"# {doc['title'] or 'Untitled conversation'}", "", f"Exported from Parley on {_now()[:10]}."]
    lines += ["Every branch is here; the one last selected is marked ★.", ""]
    roots = children.get(None, [])
    stack = [(m, _version(i, len(roots))) for i, m in reversed(list(enumerate(roots)))]  # popped in order
    while stack:
        m, version = stack.pop()
        who = "You" if m["role"] == "user" else "Assistant" if m["role"] == "assistant" else m["role"].capitalize()
        if m["role"] == "assistant" and m.get("model"):
            who += f" ({m['model']})"
        mark = " ★" if m["id"] in selected else ""
        lines += [f"### {who}{version}{mark}", "", m.get("content") or "*(no text)*", ""]
        kin = children.get(m["id"], [])
        stack += [(child, _version(i, len(kin))) for i, child in reversed(list(enumerate(kin)))]
    return "\n".join(lines)


def _version(index: int, of: int) -> str:
    return f" · version {index + 1} of {of}" if of > 1 else ""


def _branch(messages: Iterable[dict[str, Any]], leaf: str | None) -> set[str]:
    parents = {m["id"]: m["parent_id"] for m in messages}
    out: set[str] = set()
    while leaf is not None and leaf in parents and leaf not in out:
        out.add(leaf)
        leaf = parents[leaf]
    return out


async def export_conversation(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    form = request.query_params.get("format", "json")
    if form not in ("json", "markdown"):
        raise Unprocessable("`format` is json or markdown", code="invalid_format")
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    doc = conversation_json(conversation, await svc.store.messages(conversation.id))
    name = f"conversation-{conversation.id}"
    if form == "json":
        return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{name}.json"'})
    return Response(
        markdown(doc), media_type="text/markdown; charset=utf-8", headers={"Content-Disposition": f'attachment; filename="{name}.md"'}
    )


async def export_account(request: Request) -> Response:
    svc, me = await caller(request, ACCOUNT)
    user = await svc.directory.user(me.user_id)
    listed = await svc.store.conversation_ids_of(me.user_id)  # archived ones too, never the deleted
    gate = asyncio.Semaphore(READ_AHEAD)

    async def one(cid: str) -> dict[str, Any] | None:
        async with gate:
            conversation = await svc.store.conversation(cid)
            if conversation is None or conversation.user_id != me.user_id:
                return None  # deleted since it was listed
            return conversation_json(conversation, await svc.store.messages(cid))

    conversations = [c for c in await asyncio.gather(*(one(cid) for cid in listed)) if c is not None]
    files = {
        "profile.json": {"user": user.public() if user else None, "exported_at": _now()},
        "memory.json": {"facts": await svc.store.memory(me.user_id)},
        "documents.json": {"documents": [d.public() for d in await svc.store.documents_of(me.user_id)]},
        **{f"conversations/{c['id']}.json": c for c in conversations},
    }
    data = await asyncio.to_thread(_zipped, files)
    return Response(data, media_type="application/zip", headers={"Content-Disposition": 'attachment; filename="parley-export.zip"'})


def _zipped(files: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(f"parley-export/{name}", json.dumps(content, ensure_ascii=False, indent=2))
    return out.getvalue()


def _iso(value: datetime | None) -> str | None:
    return value.replace(tzinfo=timezone.utc).isoformat() if value else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
