"""Parley's reply events, written as OpenAI `chat.completion(.chunk)` objects (pure but for the stream).

See gateway/openai_compat.py for the mapping as a whole.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import ApiError, BadRequest, NotFound, ServiceUnavailable, openai_response
from schemas.endings import CONTEXT_TOO_LONG, ENGINE_REJECTED, OVERLOADED, UNKNOWN_MODEL

#: Parley's finish reasons → OpenAI's; a cancelled reply simply stops, one cut by moderation is
#: ``content_filter`` as OpenAI and Azure OpenAI report it.
FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "content_filter": "content_filter"}


# ------------------------------------------------------------------ the reply


@dataclass
class Delivery:
    """How much of a reply a client holds, so a resumed attempt adds only what is past it.

    ``at`` is where in the reply the next delta begins (a ``restarted`` notice moves it back to
    its ``offset_chars``); ``sent`` how many characters (code points) the client has.
    """

    sent: int = 0
    at: int = 0

    def restart(self, offset_chars: int) -> None:
        self.at = offset_chars

    def feed(self, text: str) -> str:
        start, self.at = self.at, self.at + len(text)
        if self.at <= self.sent:
            return ""
        out = text[max(0, self.sent - start):]
        self.sent = self.at
        return out


@dataclass(frozen=True)
class Piece:
    """One step of a reply as OpenAI sees it: text, or its end (finish and usage), or an error."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None  # Parley's ``error`` event data
    model: str = ""  # the model that answered, when the event says (an attempt's first text, the end)
    tool_calls: tuple[dict[str, Any], ...] = ()  # at the end: the client's functions the reply calls, OpenAI's shape

    @property
    def final(self) -> bool:
        return self.finish_reason is not None or self.error is not None


def usage_json(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    u = usage or {}
    prompt, completion = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(u.get("cached_tokens") or 0)},
    }


def piece_of(kind: str, data: Mapping[str, Any], delivery: Delivery) -> Piece | None:
    """A Parley SSE event (``message``, ``delta``, ``restarted``, ``done``, ``error``) as a Piece, if it is one."""
    if kind == "delta":
        text = delivery.feed(str(data.get("text", "")))
        return Piece(text=text, model=str(data.get("model") or "")) if text else None
    if kind == "restarted":
        delivery.restart(int(data.get("offset_chars", 0)))
        return None
    if kind == "done":
        calls = tuple(data.get("tool_calls") or ())
        finish = FINISH.get(str(data.get("finish_reason")), "stop")
        finish = "tool_calls" if calls and finish == "stop" else finish
        return Piece(finish_reason=finish, usage=usage_json(data.get("usage")), model=str(data.get("model") or ""), tool_calls=calls)
    if kind == "error":
        return Piece(error=dict(data))
    return None


async def pieces(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Piece]:
    """A reply's Parley events (``gateway.turns``) as Pieces, ending with the final one."""
    delivery = Delivery()
    try:
        while (event := await anext(events, None)) is not None:
            found = piece_of(event.get("event", "message"), json.loads(event["data"]), delivery)
            if found is None:
                continue
            if found.final:
                # The reader ends right after its last event: let it, so it records the reply as read
                # to its end (closed early instead, it would start an abandonment watch).
                while await anext(events, None) is not None:
                    pass
            yield found
            if found.final:
                return
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def generation_error(error: Mapping[str, Any]) -> ApiError:
    """A turn that failed or was refused, as the HTTP error an OpenAI client expects."""
    code = str(error.get("code") or "failed")
    message = str(error.get("message") or "the generation failed")
    retry_after = error.get("retry_after")
    if code == CONTEXT_TOO_LONG:
        out: ApiError = BadRequest(message, code="context_length_exceeded")
        out.param = "messages"
    elif code == ENGINE_REJECTED:  # the engine refused the request as sent (an option it lacks, a prompt too long)
        out = BadRequest(message, code="invalid_request")
    elif code == UNKNOWN_MODEL:
        out = NotFound(message, code="model_not_found")
        out.param = "model"
    elif code == OVERLOADED or retry_after is not None:
        out = ServiceUnavailable(message, code=code, retry_after=float(retry_after or 1))
    else:
        out = ApiError(message, code=code, status=500)
    return out


@dataclass(frozen=True)
class Shape:
    """What every chunk or completion of one response repeats."""

    id: str  # chatcmpl-<reply id>: a retried request answers the same id
    created: int  # unix seconds
    model: str


def shape_for(reply_id: str, model: str, now: float) -> Shape:
    return Shape(f"chatcmpl-{reply_id}", int(now), model or "auto")


def chunk(shape: Shape, delta: dict[str, Any], finish_reason: str | None = None, *, with_usage: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": shape.id,
        "object": "chat.completion.chunk",
        "created": shape.created,
        "model": shape.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if with_usage:
        out["usage"] = None  # OpenAI's chunks before the usage chunk say so
    return out


def usage_chunk(shape: Shape, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": shape.id,
        "object": "chat.completion.chunk",
        "created": shape.created,
        "model": shape.model,
        "choices": [],
        "usage": usage,
    }


def completion(
    shape: Shape, text: str | None, finish_reason: str, usage: dict[str, Any], tool_calls: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    """A whole ``chat.completion``; ``text`` None (a reply moderation withdrew) is ``content: null``, as Azure
    sends; a reply that only calls tools has ``content: null`` too, as OpenAI sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message = {"role": "assistant", "content": text or None, "tool_calls": list(tool_calls)}
    return {
        "id": shape.id,
        "object": "chat.completion",
        "created": shape.created,
        "model": shape.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage,
    }


def tool_call_deltas(calls: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """The ``delta``s that stream ``calls`` as OpenAI streams them: per call, one naming it (its index, id, type,
    name and empty arguments), then one with its arguments."""
    out: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        function = call.get("function", {})
        head = {"index": index, "id": call.get("id"), "type": "function", "function": {"name": function.get("name"), "arguments": ""}}
        out.append({"tool_calls": [head]})
        out.append({"tool_calls": [{"index": index, "function": {"arguments": function.get("arguments", "")}}]})
    return out


def error_body(error: ApiError) -> dict[str, Any]:
    """An error as the ``data:`` of a stream that already began."""
    return json.loads(bytes(openai_response(error).body))


async def stream_chunks(shape: Shape, first: Piece, rest: AsyncIterator[Piece], include_usage: bool) -> AsyncIterator[str]:
    """The SSE ``data:`` payloads of a streamed reply whose first Piece is ``first`` (not an error)."""
    yield json.dumps(chunk(shape, {"role": "assistant", "content": ""}, with_usage=include_usage), ensure_ascii=False)

    async def all_pieces() -> AsyncIterator[Piece]:
        yield first
        async for p in rest:
            yield p

    try:
        async for p in all_pieces():
            if p.error is not None:
                yield json.dumps(error_body(generation_error(p.error)), ensure_ascii=False)
                return
            if p.text:
                yield json.dumps(chunk(shape, {"content": p.text}, with_usage=include_usage), ensure_ascii=False)
            if p.finish_reason is not None:
                for delta in tool_call_deltas(p.tool_calls):
                    yield json.dumps(chunk(shape, delta, with_usage=include_usage), ensure_ascii=False)
                yield json.dumps(chunk(shape, {}, p.finish_reason, with_usage=include_usage), ensure_ascii=False)
                if include_usage:
                    yield json.dumps(usage_chunk(shape, p.usage or usage_json(None)), ensure_ascii=False)
                yield "[DONE]"
                return
    finally:
        await finish_reading(rest)

async def finish_reading(replies: AsyncIterator[Piece]) -> None:
    """Let the reply's reader end as it would on its own (no abandonment watch for a finished reply)."""
    close = getattr(replies, "aclose", None)
    if close is not None:
        await close()
