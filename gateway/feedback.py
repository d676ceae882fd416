"""Feedback on replies: ``PUT`` / ``DELETE /v1/conversations/{id}/messages/{message_id}/feedback``
(DESIGN.md §7).

The conversation's owner rates one of its replies up or down, with an optional reason in their own words,
or takes the rating back; each is a ``FeedbackGiven`` on ``chat.events`` (the last one of a reply stands),
written through to the reply's row so the next read shows it, and read by the analysts' replay and report
beside the turn it rates.

Who may call: the owner alone (anyone else's conversation, or one that is deleted, is a 404, as every
conversation route). What it reaches: one reply of that conversation. Hostile values: a rating other
than ``up`` or ``down``, a reason that is not text or longer than ``MAX_REASON_CHARS``, an unknown field:
422 naming it (413 for a reason too long); a message that is not in the conversation: 404; the user's own message: 422 ``not_a_reply``.
The reason is content: sealed on the log and in the row, never logged.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.auth import Principal
from gateway.errors import NotFound, Unprocessable
from gateway.services import Services, services, trace_id
from gateway.validation import json_body, only, string, uuid_string
from schemas.events import FeedbackGiven
from streams import tree

RATINGS = ("up", "down")
MAX_REASON_CHARS = 500


async def rate(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, {"rating", "reason"}, "feedback")
    rating = string(body, "rating", max_chars=8)
    if rating not in RATINGS:
        raise Unprocessable("`rating` is up or down", code="invalid_rating")
    reason = string(body, "reason", max_chars=MAX_REASON_CHARS, required=False, allow_empty=True)
    if reason is None:
        raise Unprocessable("`reason` must be a string; leave it out for none")
    reason = reason if isinstance(reason, str) else ""  # absent: no reason
    await _give(request, svc, user, rating, reason)
    return JSONResponse({"message_id": request.path_params["message_id"], "rating": rating, "reason": reason})


async def unrate(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    await _give(request, svc, user, "", "")
    return Response(status_code=204)


async def _give(request: Request, svc: Services, user: Principal, rating: str, reason: str) -> None:
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    try:
        message_id = uuid_string(request.path_params["message_id"], "message_id")
    except Unprocessable:
        raise NotFound("no message of that id in this conversation", code="message_not_found") from None
    reply = await svc.store.message(conversation.id, message_id)
    if reply is None:
        raise NotFound("no message of that id in this conversation", code="message_not_found")
    if reply.role != "assistant":
        raise Unprocessable("only a reply is rated; this message is the user's", code="not_a_reply")
    event = FeedbackGiven(
        conversation_id=conversation.id, user_id=user.user_id, message_id=message_id, rating=rating, reason=reason,
        trace_id=trace_id(request),
    )  # fmt: skip
    await svc.append(event)
    state = tree.empty(conversation.id).with_message(tree.Message(message_id, reply.parent_id, "assistant"))
    await svc.write_through(event, state=state)
