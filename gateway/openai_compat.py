"""``POST /v1/chat/completions``: OpenAI's chat API over Parley's turns (DESIGN.md §7).

Existing OpenAI clients (``client.chat.completions.create(model=…, messages=[…],
stream=…, max_tokens=…, user=…)``) work against Parley with a Parley API key as
their ``api_key``. No side path: a request becomes the same events as a posted
message (chat.events → context builder → router → worker → chat.tokens), so
quotas, admission, usage, metrics and the audit apply as to any other turn.

A stateless request onto the conversation tree
----------------------------------------------
OpenAI sends the whole history each time; Parley keeps a tree and answers a node.
The mapping is deterministic, so the same history always lands on the same nodes:

- Each message ``i`` gets a key, ``openai:`` + a SHA-256 chain over the (role,
  content) of messages ``0..i``; the key is its ``client_message_id``, so its id
  is the usual ``uuid5(conversation:key)`` (DESIGN.md §5).
- The conversation is ``uuid5(NS, openai:[user_id, user field, key of the
  opening])``, the opening being the messages up to the first user message. A
  client that resends the growing history turn after turn stays in one
  conversation (listed by ``GET /v1/conversations`` like any other); another
  opening, or another ``user``, is another conversation.
- Messages not in the tree yet are appended as MessagePosted with their role
  (``developer`` is ``system``). An assistant message equal to a reply Parley
  stored under the same parent *is* that reply: turn k+1 continues the branch
  turn k produced. One that differs (edited by the client, or from elsewhere) is
  posted as an ``assistant`` MessagePosted, a sibling branch; the prompt is the
  same text either way (prompts render role + content), so the engine's prefix
  cache holds it in both cases. A reply still being stored when the next turn
  arrives is waited for briefly (``REPLY_WAIT_S``) so it can be recognised.
- The reply: every call is a new sample, as on any OpenAI-compatible server —
  a sibling reply under the same question (whose prompt the engine has cached).
  With an ``Idempotency-Key`` header (Stripe's and OpenAI-style APIs'
  convention) the reply's id comes from the key, so a retried call finds its
  reply and streams it again, live or stored (usage as first counted),
  appending nothing. The last message must be the user's.

Models: ``model`` is a pool or a pool's model name (``PARLEY_ROUTER_POOLS``), the
user's choice as in ``post_message``; ``auto`` or empty lets the router choose.
Any other name is a 404 ``model_not_found`` before anything is appended (the
router would fail the turn with ``unknown_model``). Responses name the model that answered
(its engine's name for it, carried by the first chunk of text).

Replies: streaming is ``text/event-stream`` of ``chat.completion.chunk`` objects
(the role first, then content deltas, a last chunk with ``finish_reason``, a usage
chunk with no choices when ``stream_options.include_usage``), then ``data:
[DONE]``; otherwise one ``chat.completion`` with ``usage``. Finish reasons: stop
and length as they are, cancelled is ``stop`` (the text so far, nothing more),
content_filter as it is (moderation cut the reply; a whole completion then has
``content: null``).
A whole completion waits for the reply, so a turn failed or refused is an HTTP
error (overloaded: 503 + Retry-After; context_too_long: 400
``context_length_exceeded``). A stream starts at once (headers and an SSE comment
while the turn queues: clients and proxies with header timeouts keep it), so a
turn refused or failed after that ends the stream with ``data: {"error": …}`` and
no ``[DONE]``, which OpenAI clients raise.

The conversation as sent: the turn is ``as_sent`` (no system prompt, memory,
documents or summary of Parley's; nothing trimmed; no cap of Parley's on the reply,
which may run to the end of the pool's context). An OpenAI client cannot resume a
reply (it has no cursor): without an ``Idempotency-Key`` (with one, a retry finds
the reply), a client that leaves cancels it at once.

Parley's ``restarted`` notice has no OpenAI equivalent and clients cannot cut text: the
deltas of a resumed attempt are sent only past the characters already sent
(``Delivery``); the continuation is the new attempt's text from there.

Errors are OpenAI's shape (``gateway.errors.openai_response``): bad parameters are
400 with ``param`` as OpenAI answers them (Parley's other routes use 422), bodies
too large 413, 401 without a valid key, 429 for quotas, 503 + Retry-After. Sampling
parameters (``temperature``, ``top_p``, ``seed``, ``stop``, the penalties,
``response_format`` as a JSON Schema) travel with the turn to the engine
(gateway/sampling.py); an engine that cannot honour one fails the turn naming
it. Anything else (``n`` > 1, logprobs, the legacy ``functions``, an unknown
field) is a 400 ``unsupported_parameter`` naming it, unless it holds its neutral
value. Message text is never logged.

Function calling (client-side tools): ``tools``, ``tool_choice`` and
``parallel_tool_calls`` are read and bounded by gateway/openai_tools.py and ride
on the GenerationRequested; a history's assistant ``tool_calls`` and ``role:
"tool"`` results are MessagePosted like any message (a resent assistant message
with the same calls is the stored reply that made them). The worker parses the
model's calls (workers/tool_calls.py); they come back on the reply's ``done``
and are answered as ``message.tool_calls`` / ``delta.tool_calls`` with
``finish_reason: "tool_calls"`` (gateway/openai_reply.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import ownership, turns
from gateway.auth import Principal
from gateway.errors import ApiError, Conflict, NotFound, ServiceUnavailable, openai_response
from gateway.openai_reply import (
    Piece,
    completion,
    error_body,
    finish_reading,
    generation_error,
    pieces,
    shape_for,
    stream_chunks,
    usage_json,
)
from gateway.openai_request import (
    ChatRequest,
    after_deletion,
    Plan,
    conversation_id_for,
    message_keys,
    invalid,
    parse_request,
    plan_turn,
    reply_key,
    resolve_model,
)
from gateway.services import Services, services, trace_id
from gateway.validation import json_body
from parley.errors import Unavailable
from schemas.events import ConversationCreated, GenerationCancelRequested, GenerationRequested, MessagePosted

log = logging.getLogger(__name__)

#: How long a new turn waits for the previous reply to be stored before treating the history's copy as new.
REPLY_WAIT_S = 5.0
IDEMPOTENCY_KEY_MAX = 200
#: Deleted conversations of one history stepped over before giving up (each resend after a delete makes one).
DELETED_MAX = 32


# ------------------------------------------------------------------ the handler


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``; every error in OpenAI's shape."""
    svc = services(request)
    try:
        return await _complete(request, svc)
    except ApiError as exc:
        return openai_response(exc)
    except Unavailable:  # Cassandra down, and nothing cached to go on
        return openai_response(
            ServiceUnavailable("a backing service is unavailable; retry shortly", retry_after=svc.settings.retry_after_s)
        )


async def _complete(request: Request, svc: Services) -> Response:
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    chat = parse_request(body, svc.settings.max_message_chars)
    model = resolve_model(chat.model, request.app.state.router_policy)
    idempotency = _idempotency_key(request)
    plan, events = await _turn(request, svc, user, chat, model, idempotency)
    # A client that sent no Idempotency-Key cannot come back to this reply: when it goes, the reply is abandoned.
    on_gone = None if idempotency else lambda: _abandon(svc, user, plan)
    if chat.stream:
        return EventSourceResponse(
            _streamed(chat, plan, pieces(events), on_gone),
            ping=svc.settings.stream_ping_s,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    collecting = asyncio.create_task(_whole(chat, plan, pieces(events)))
    gone = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({collecting, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not collecting.done():  # the client left before its answer: nobody will read it
        collecting.cancel()
        if on_gone is not None:
            on_gone()
        return Response(status_code=499)  # never sent: the connection is gone (nginx's code for it, in logs)
    return JSONResponse(collecting.result())


async def _whole(chat: ChatRequest, plan: Plan, replies: AsyncIterator[Piece]) -> dict[str, Any]:
    """The whole ``chat.completion``; the ApiError a turn failed or was refused with."""
    try:
        first = await anext(replies, None)
        if first is None or first.error is not None:  # refused or failed before any text: an HTTP error
            raise generation_error(first.error if first is not None else {})
        # The model that answers, as its engine names it (the first text carries it), not the name asked for.
        shape = shape_for(plan.reply_id, first.model or chat.model, time.time())
        text, last = [first.text], first
        while not last.final:
            following = await anext(replies, None)
            if following is None:
                raise generation_error({"message": "the reply ended early; retry the request"})
            text.append(following.text)
            last = following
    finally:
        await finish_reading(replies)
    if last.error is not None:
        raise generation_error(last.error)
    finish = last.finish_reason or "stop"
    content = None if finish == "content_filter" else "".join(text)
    return completion(shape, content, finish, last.usage or usage_json(None), last.tool_calls)


async def _streamed(
    chat: ChatRequest, plan: Plan, replies: AsyncIterator[Piece], on_gone: Callable[[], None] | None
) -> AsyncIterator[dict[str, Any]]:
    """The stream's events: a comment at once (headers and a first byte while the turn is queued), then the
    chunks. A turn refused or failed before its first text is an error ``data:`` (the status is sent)."""
    ended = False
    try:
        yield {"comment": "parley: accepted"}
        first = await anext(replies, None)
        if first is None or first.error is not None:
            ended = True
            yield {"data": json.dumps(error_body(generation_error(first.error if first is not None else {})))}
            return
        shape = shape_for(plan.reply_id, first.model or chat.model, time.time())
        async for data in stream_chunks(shape, first, replies, chat.include_usage):
            ended = ended or data == "[DONE]" or data.startswith('{"error"')
            yield {"data": data}
    finally:
        await finish_reading(replies)
        if not ended and on_gone is not None:
            on_gone()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body is read: what ``receive`` gives next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _abandon(svc: Services, user: Principal, plan: Plan) -> None:
    """Cancel a reply whose client left and cannot resume it (an OpenAI client has no cursor), at once rather
    than after the abandonment grace; in a task of its own, as the caller is being cancelled."""
    cancel = GenerationCancelRequested(
        conversation_id=plan.conversation_id, user_id=user.user_id, request_id=plan.reply_id, reason="abandoned"
    )
    svc.spawn(_append_quietly(svc, cancel))


async def _append_quietly(svc: Services, event: GenerationCancelRequested) -> None:
    try:
        await svc.append(event)
    except Exception as exc:  # the abandonment watch cancels it later anyway
        log.warning("could not cancel a reply its client left", extra={"request_id": event.request_id, "error": type(exc).__name__})


def _idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header (Stripe's and OpenAI-style APIs' convention), checked."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 0 < len(key) <= IDEMPOTENCY_KEY_MAX or not key.isprintable():
        raise invalid(f"`Idempotency-Key` must be 1 to {IDEMPOTENCY_KEY_MAX} printable characters", "Idempotency-Key")
    return key


async def _turn(
    request: Request, svc: Services, user: Principal, chat: ChatRequest, model: str | None, idempotency: str | None
) -> tuple[Plan, AsyncIterator[dict[str, Any]]]:
    """Place the history in the tree, append what it lacks and ask for the reply (or find it: a retry)."""
    trace = trace_id(request)
    keys = message_keys(user.user_id, chat.messages)
    cid = conversation_id_for(user.user_id, chat.end_user, chat.messages, keys)
    for _ in range(DELETED_MAX):
        try:
            conversation = await svc.owned(user, cid, cached_ok=True)
        except NotFound:
            conversation = None
            if await svc.store.deleted(cid):  # never recreated under its id (a ghost): a new one after it
                cid = after_deletion(cid)
                continue
        break
    else:
        raise Conflict("this history's conversation was deleted too many times; change its opening", code="deleted")
    ownership.check(request, svc, cid)  # derived from the user: only now is its partition, and so its owner, known
    stored = [] if conversation is None else await svc.messages_for_posting(conversation)
    reply = reply_key(keys[-1], idempotency)
    plan = plan_turn(cid, chat.messages, keys, stored, reply)
    if plan.pending is not None and conversation is not None:
        stored = await _settled(svc, conversation, plan.pending, stored)
        plan = plan_turn(cid, chat.messages, keys, stored, reply)

    if plan.replayed:  # the same reply again, nothing appended
        existing = next(m for m in stored if m.id == plan.reply_id)
        return plan, await turns.resume_events(svc, cid, user.user_id, plan.question_id, existing, None)
    await svc.quotas.check(user, plan.reply_id)  # 429 before anything is appended
    common = {"conversation_id": cid, "user_id": user.user_id, "trace_id": trace}
    created = [] if conversation is not None else [ConversationCreated(**common, model=model)]
    posted = [
        MessagePosted(
            **common, message_id=p.message_id, parent_id=p.parent_id, client_message_id=p.key, role=p.role, content=p.content,
            model=model, tool_calls=list(p.tool_calls), tool_call_id=p.tool_call_id,
        )
        for p in plan.posts
    ]
    requested = GenerationRequested(
        **common,
        request_id=plan.reply_id,
        parent_id=plan.question_id,
        client_message_id=plan.reply_key,
        model=model,
        tier=user.tier,
        org_id=user.org_id,
        max_tokens=chat.max_tokens,
        sampling=chat.sampling,
        as_sent=True,  # the client's conversation as it sent it: nothing added, nothing left out
        tools=chat.tools,
    )
    return plan, await turns.open_reply(svc, [*created, *posted, requested], requested, plan.question_id)


async def _settled(svc: Services, conversation: Any, pending: str, stored: list[Any]) -> list[Any]:
    """The conversation's messages once ``pending`` (a reply) is stored as finished, or after REPLY_WAIT_S.

    Cassandra down: ``stored`` as it is (the history's copy of the reply then becomes a sibling branch).
    """
    try:
        await svc.store.message_when(
            conversation.id, pending, lambda found: found is None or found.status not in (None, "streaming"), REPLY_WAIT_S
        )
        return await svc.messages_for_posting(conversation)
    except Unavailable:
        return stored
