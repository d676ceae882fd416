"""Message handlers: stop a generation, regenerate a reply, resume a reply's stream."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import ownership, replies, turns
from gateway.auth import Principal
from gateway.errors import NotFound, Unprocessable
from gateway.services import Services, services, trace_id
from gateway.store import MessageRow
from gateway.conversations import turn_options
from gateway.models import chosen_model
from gateway.validation import client_key, json_body, only, string
from parley import ids
from schemas.events import GenerationCancelRequested, GenerationRequested

ID_MAX = 200
#: What a regenerate takes: its key, and the options a post takes for the new reply.
REGENERATE_FIELDS = frozenset({"client_message_id", "model", "sampling", "max_tokens"})


async def _owned_message(svc: Services, user: Principal, message_id: str) -> tuple[str, MessageRow]:
    found = await svc.store.find_message(message_id)
    if found is None:
        raise NotFound("no such message")
    conversation_id, message = found
    await svc.owned(user, conversation_id)  # another user's message is a 404 too
    return conversation_id, message


async def stop(request: Request) -> Response:
    """Cancel a generation; a finished reply is left as it is (200 either way)."""
    svc = services(request)
    user = await svc.auth(request)
    conversation_id, message = await _owned_message(svc, user, request.path_params["message_id"])
    if message.role != "assistant":
        raise Unprocessable("only a reply (an assistant message) can be stopped", code="not_a_reply")
    if message.status in replies.FINISHED:
        return JSONResponse({"message_id": message.id, "status": message.status, "stopping": False})
    await svc.append(
        GenerationCancelRequested(
            conversation_id=conversation_id, user_id=user.user_id, request_id=message.id, reason="user", trace_id=trace_id(request)
        )
    )
    return JSONResponse({"message_id": message.id, "status": message.status, "stopping": True})


async def regenerate(request: Request) -> Response:
    """A new reply to the same user message: a sibling of the one named."""
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, REGENERATE_FIELDS, "a regenerate")
    client_message_id = client_key(body, ID_MAX)
    model = chosen_model(request, string(body, "model", max_chars=ID_MAX, required=False))
    sampling, max_tokens = turn_options(body)
    conversation_id, message = await _owned_message(svc, user, request.path_params["message_id"])
    if message.role != "assistant" or message.parent_id is None:
        raise Unprocessable("regenerate names a reply (an assistant message)", code="not_a_reply")
    ownership.check(request, svc, conversation_id)  # the new reply streams from its conversation's partition
    reply_id = ids.reply_id(conversation_id, client_message_id)
    existing = await svc.store.message(conversation_id, reply_id)
    if existing is not None:  # a retried regenerate
        return await turns.resume(svc, conversation_id, user.user_id, message.parent_id, existing, None)
    await svc.quotas.check(user, reply_id)  # 429 before anything is appended (gateway/quotas.py)
    requested = GenerationRequested(
        conversation_id=conversation_id,
        user_id=user.user_id,
        trace_id=trace_id(request),
        request_id=reply_id,
        parent_id=message.parent_id,
        client_message_id=client_message_id,
        model=model,
        tier=user.tier,
        org_id=user.org_id,
        max_tokens=max_tokens,
        sampling=sampling,
    )
    return await turns.start_reply(svc, [requested], requested, message.parent_id)


async def stream(request: Request) -> Response:
    """Resume a reply: after ``Last-Event-ID`` on any gateway, or from its start, or stored when finished."""
    svc = services(request)
    user = await svc.auth(request)
    conversation_id, message = await _owned_message(svc, user, request.path_params["message_id"])
    if message.role != "assistant" or message.parent_id is None:
        raise Unprocessable("only a reply (an assistant message) has a stream", code="not_a_reply")
    after = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if message.status not in replies.FINISHED:
        ownership.check(request, svc, conversation_id)  # read live: from the owner of its partition
    return await turns.resume(svc, conversation_id, user.user_id, message.parent_id, message, after)
