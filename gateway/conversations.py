"""Conversation handlers: create, list, read the tree, post a message, select a branch."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import replies, tool_calls, turns
from gateway.errors import NotFound, Unprocessable
from gateway.openai_request import MAX_TOKENS
from gateway.sampling import FIELDS as SAMPLING_FIELDS
from gateway.sampling import check_min_tokens, parse_sampling
from gateway.services import services, trace_id
from gateway.models import chosen_model
from gateway.validation import MISSING, client_key, json_body, only, string, uuid_string
from parley import ids
from parley.errors import Unavailable
from parley.shards import mint_conversation_id
from gateway.store import ConversationRow
from schemas.catalog import TOPICS
from schemas.events import (
    ConversationArchived,
    ConversationCreated,
    ConversationDeleted,
    ConversationEvent,
    ConversationRenamed,
    GenerationCancelRequested,
    GenerationRequested,
    LeafSelected,
    MessagePosted,
    Sampling,
)
from streams import tree
from streams.projection import from_time

ID_MAX = 200  # client ids, model names
TITLE_MAX = 200
#: What a posted message may carry; anything else is refused by name.
POST_FIELDS = frozenset(
    {"content", "client_message_id", "model", "parent_id", "sampling", "max_tokens", "document_ids", "tools"}
)
#: How long a retried POST whose question is stored waits for its reply's row before appending the turn again.
RETRY_REPLY_WAIT_S = 10.0


async def create_conversation(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes, required=False)
    only(body, {"title", "model"}, "a conversation")
    title = string(body, "title", max_chars=200, required=False, allow_empty=True)
    model = chosen_model(request, string(body, "model", max_chars=ID_MAX, required=False))
    event = ConversationCreated(
        # On this gateway's own chat.tokens partitions: the edge sends the conversation's streams back here.
        conversation_id=mint_conversation_id(svc.tokens.shard, TOPICS["chat.tokens"].partitions),
        user_id=user.user_id,
        title="" if title in (MISSING, None) else title,
        model=model,
        trace_id=trace_id(request),
    )
    await svc.append(event)
    await svc.write_through(event)
    created = datetime.fromtimestamp(event.occurred_at / 1e6, tz=timezone.utc)
    body_out = {"id": event.conversation_id, "title": event.title, "model": event.model, "created_at": created.isoformat()}
    return JSONResponse(body_out, status_code=201)


async def list_conversations(request: Request) -> Response:
    """The user's conversations, newest first; ``?archived=true``: the archived ones instead."""
    svc = services(request)
    user = await svc.auth(request)
    flag = request.query_params.get("archived", "false").lower()
    if flag not in ("true", "false"):
        raise Unprocessable("`archived` must be true or false")
    return JSONResponse({"conversations": await svc.store.conversations_of(user.user_id, archived=flag == "true")})


async def update_conversation(request: Request) -> Response:
    """``PATCH``: a new ``title`` and/or ``archived``; each an event, written through for the next read."""
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    unknown = sorted(set(body) - {"title", "archived"})
    if unknown or not body:
        raise Unprocessable(
            f"`{unknown[0]}` cannot be changed; send title and/or archived" if unknown else "send title and/or archived",
            code="unknown_field" if unknown else "missing_field",
        )
    title = string(body, "title", max_chars=TITLE_MAX, required=False)
    if title is None:
        raise Unprocessable("`title` must be a string (a conversation keeps a title; send a new one)")
    if title is not MISSING:
        title = title.strip()
    archived = body.get("archived", MISSING)
    if archived is not MISSING and not isinstance(archived, bool):
        raise Unprocessable("`archived` must be true or false")
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    common = {"conversation_id": conversation.id, "user_id": user.user_id, "trace_id": trace_id(request)}
    events: list[ConversationEvent] = []
    if title is not MISSING:
        events.append(ConversationRenamed(**common, title=title, by="user"))
    if archived is not MISSING:
        events.append(ConversationArchived(**common, archived=archived))
    await svc.append(*events)
    await svc.write_through(*events, state=_state(conversation))
    return JSONResponse(
        {
            "id": conversation.id,
            "title": conversation.title if title is MISSING else title,
            "archived": archived if archived is not MISSING else conversation.archived,
        }
    )


async def delete_conversation(request: Request) -> Response:
    """Gone from every read path at once (its rows are marked, written through); 204. A reply still
    being written is cancelled: nobody can read it any more, and its text must stop reaching the rows."""
    svc = services(request)
    user = await svc.auth(request)
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    trace = trace_id(request)
    event = ConversationDeleted(conversation_id=conversation.id, user_id=user.user_id, trace_id=trace)
    statuses = await svc.store.reply_statuses(conversation.id)
    cancels = [
        GenerationCancelRequested(conversation_id=conversation.id, user_id=user.user_id, request_id=rid, reason="user", trace_id=trace)
        for rid, status in statuses.items()
        if status not in replies.FINISHED
    ]
    await svc.append(event, *cancels)
    await svc.write_through(event, state=_state(conversation))
    return Response(status_code=204)


def _state(conversation: ConversationRow) -> tree.Conversation:
    """What the projection needs of a stored conversation: its owner and creation (the list's key)."""
    return tree.Conversation(
        conversation_id=conversation.id,
        user_id=conversation.user_id,
        title=conversation.title,
        created_at=from_time(conversation.created_at),
    )


async def get_conversation(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    messages = await svc.store.messages(conversation.id)
    return JSONResponse(
        {
            "id": conversation.id,
            "title": conversation.title,
            "model": conversation.model,
            "selected_leaf_id": conversation.selected_leaf_id,
            "messages": [message_json(m) for m in messages],
        }
    )


def message_json(m: Any) -> dict[str, Any]:
    return {
        "id": m.id,
        "parent_id": m.parent_id,
        "role": m.role,
        "content": m.content,
        "model": m.model,
        "status": m.status,
        "finish_reason": m.finish_reason,
        "tokens": m.tokens,
        "created_at": m.created_at.replace(tzinfo=timezone.utc).isoformat() if m.created_at else None,
        **m.documents_json(),
        **m.tools_json(),
        **({"moderation": m.moderation} if m.moderation else {}),
        **({"feedback": m.feedback} if m.feedback else {}),
    }


async def post_message(request: Request) -> Response:
    """A new user message (a sibling when its parent already has children: an edit) and its reply."""
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    unknown = sorted(set(body) - POST_FIELDS)
    if unknown:
        raise Unprocessable(f"`{unknown[0]}` is not a field of a message; send {', '.join(sorted(POST_FIELDS))}", code="unknown_field")
    content = string(body, "content", max_chars=svc.settings.max_message_chars)
    client_message_id = client_key(body, ID_MAX)
    sampling, max_tokens = turn_options(body)
    tools = await tool_calls.offered(svc.tools, svc.org_tools, user.org_id, body.get("tools"))
    model = chosen_model(request, string(body, "model", max_chars=ID_MAX, required=False))
    parent_id = string(body, "parent_id", max_chars=ID_MAX, required=False)
    # Cassandra down: a conversation this process served recently still takes messages (gateway/recent.py).
    # Its attachments are read beside it (on every turn's way to its first token), used only once it is the user's.
    (conversation, messages), attached = await asyncio.gather(
        svc.for_posting(user, request.path_params["conversation_id"]), attached_documents(svc, request.path_params["conversation_id"])
    )
    known = {m.id for m in messages}
    document_ids = await turn_documents(svc, user.user_id, named_documents(svc, body.get("document_ids")), attached)

    if parent_id is MISSING:  # continue the selected branch
        parent_id = conversation.selected_leaf_id if conversation.selected_leaf_id in known else None
        if parent_id is None and messages:
            parent_id = messages[-1].id
    elif parent_id is not None:
        parent_id = uuid_string(parent_id, "parent_id")
        if parent_id not in known:
            raise Unprocessable("`parent_id` is not a message of this conversation", code="unknown_parent")

    user_message_id = ids.user_message_id(conversation.id, client_message_id)
    reply_id = ids.reply_id(conversation.id, client_message_id)
    existing = next((m for m in messages if m.id == reply_id), None)
    if existing is not None:  # a retried POST: the same reply, not a second one, read whole (the tree has no text)
        try:
            existing = await svc.store.message(conversation.id, reply_id) or existing
        except Unavailable:
            pass  # Cassandra is down: the tree row, as the rows from gateway/recent.py have always been
        return await turns.resume(svc, conversation.id, user.user_id, user_message_id, existing, None)
    question = next((m for m in messages if m.id == user_message_id), None)
    if question is not None:
        # A retried POST whose question is stored and whose reply's row is not yet (the first attempt's gateway
        # died between its two write-throughs, or the materializer is behind): once the reply's row is there, the
        # reply resumes from where it began on the log; until then the same events go again, at the question's
        # own place (never under itself, the branch's end now being the question).
        stored = await _reply_row(svc, conversation.id, reply_id)
        if stored is not None:
            return await turns.resume(svc, conversation.id, user.user_id, user_message_id, stored, None)
        parent_id = question.parent_id
    await svc.quotas.check(user, reply_id)  # 429 before anything is appended (gateway/quotas.py)

    common = {"conversation_id": conversation.id, "user_id": user.user_id, "trace_id": trace_id(request)}
    posted = MessagePosted(
        **common,
        message_id=user_message_id,
        parent_id=parent_id,
        client_message_id=client_message_id,
        content=content,
        model=model,
        document_ids=document_ids,
    )
    requested = GenerationRequested(
        **common,
        request_id=reply_id,
        parent_id=user_message_id,
        client_message_id=client_message_id,
        model=model,
        tier=user.tier,
        org_id=user.org_id,
        max_tokens=max_tokens,
        sampling=sampling,
        tools=tools,
    )
    return await turns.start_reply(svc, [posted, requested], requested, user_message_id)


async def _reply_row(svc: Any, conversation_id: str, reply_id: str) -> Any:
    """The reply's row, waited for up to RETRY_REPLY_WAIT_S; None if it is not there by then or Cassandra is down."""
    try:
        return await svc.store.message_when(conversation_id, reply_id, lambda found: found is not None, RETRY_REPLY_WAIT_S)
    except Unavailable:
        return None


def named_documents(svc: Any, named: Any) -> list[str]:
    """The ids in ``document_ids``, checked for shape (422), each once, in order."""
    if named is None:
        return []
    most = svc.documents.settings.max_documents_per_message
    if not isinstance(named, list) or not all(isinstance(d, str) for d in named):
        raise Unprocessable("`document_ids` is a list of document ids", code="invalid_document_ids")
    if len(named) > most:
        raise Unprocessable(f"a message may name at most {most} documents", code="too_many_documents")
    return list(dict.fromkeys(uuid_string(d, "document_ids") for d in named))


async def attached_documents(svc: Any, conversation_id: str) -> list[str]:
    """The documents uploaded into the conversation; none while Cassandra is down (the turn still goes)."""
    try:
        return await svc.store.conversation_documents(conversation_id)
    except (Unavailable, ValueError):  # ValueError: not an id; for_posting answers that one
        return []


async def turn_documents(svc: Any, user_id: str, named: list[str], attached: list[str]) -> list[str]:
    """The documents a message uses: those it names (each the user's, else 404; not failed, else 422), then
    those attached to its conversation, each once."""
    rows = await asyncio.gather(*(svc.store.document(user_id, d) for d in named))
    for document_id, row in zip(named, rows):
        if row is None:
            raise NotFound(f"no such document: {document_id}", code="document_not_found")
        if row.status == "failed":
            raise Unprocessable(f"document {document_id} failed ({row.error_code}); it cannot be asked about", code="document_failed")
    return list(dict.fromkeys([*named, *attached]))


def turn_options(body: dict[str, Any]) -> tuple[Sampling, int | None]:
    """``sampling`` (an object of ``temperature``, ``top_p``, ``seed``, ``stop``, ``presence_penalty``,
    ``frequency_penalty``, ``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``, ``stop_token_ids``,
    ``min_tokens``) and ``max_tokens``, checked; 422 naming the field."""
    raw = body.get("sampling")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise Unprocessable("`sampling` must be an object")
    unknown = sorted(set(raw) - SAMPLING_FIELDS)
    if unknown:
        raise Unprocessable(
            f"`sampling.{unknown[0]}` is not supported; send {', '.join(sorted(SAMPLING_FIELDS))}", code="unsupported_parameter"
        )
    sampling = parse_sampling(raw, lambda message, field: Unprocessable(message), prefix="sampling.")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS):
        raise Unprocessable(f"`max_tokens` must be an integer from 1 to {MAX_TOKENS}")
    check_min_tokens(sampling, max_tokens, lambda message, field: Unprocessable(message), prefix="sampling.")
    return sampling, max_tokens


async def select_leaf(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, {"leaf_id"}, "a branch choice")
    leaf_id = uuid_string(string(body, "leaf_id", max_chars=ID_MAX), "leaf_id")
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    if await svc.store.message(conversation.id, leaf_id) is None:
        raise Unprocessable("`leaf_id` is not a message of this conversation", code="unknown_message")
    event = LeafSelected(conversation_id=conversation.id, user_id=user.user_id, leaf_id=leaf_id, trace_id=trace_id(request))
    await svc.append(event)
    await svc.write_through(event)
    return JSONResponse({"id": conversation.id, "selected_leaf_id": leaf_id})
