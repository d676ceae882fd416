"""A reply as SSE events (DESIGN.md §7): ``message``, ``delta``…, then ``done`` or ``error``.

When a worker died mid-reply another one resumes it as a new attempt (workers/recovery.py);
its first chunk says how many characters of the reply it keeps (``offset_chars``), so the
stream says ``restarted {message_id, attempt, offset_chars}``: the client keeps that many
characters (code points) of what it shows and appends the deltas that follow.

Every event carries an ``id:`` cursor ``partition:offset`` of ``chat.tokens``;
the ``message`` event's cursor is the position just before the reply's first
possible chunk, so resuming from any cursor continues exactly after it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from json.encoder import encode_basestring as _json_string  # json.dumps(str, ensure_ascii=False), the C part of it
from collections.abc import AsyncIterator
from typing import Any

from gateway.store import MessageRow, tool_calls_json
from gateway.tokens import Chunk, Stream, TokenStreams
from parley.metrics import GATEWAY_TTFT
from schemas.endings import FILTERED_NOTICE, client_message
from schemas.events import TokenChunk

FINISHED = {"complete", "cancelled", "failed", "rejected", "filtered"}


def sse(event: str, data: dict[str, Any], cursor: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"event": event, "data": json.dumps(data, ensure_ascii=False)}
    if cursor is not None:
        out["id"] = cursor
    return out


def wire(event: dict[str, Any]) -> bytes:
    """An event as SSE bytes, as sse-starlette writes them (a unit test compares the two), at a
    twentieth of its cost: this runs once per chunk and stream. ``data`` is JSON, never a newline."""
    cursor = event.get("id")
    head = f"id: {cursor}\r\n" if cursor is not None else ""
    return f"{head}event: {event['event']}\r\ndata: {event['data']}\r\n\r\n".encode()


def delta(text: str, model: str, cursor: str) -> dict[str, Any]:
    """``sse("delta", {"text": text, "model"?: model}, cursor)``, the JSON written without the dict and
    the general encoder: this runs once per chunk and stream (a unit test compares the two)."""
    data = '{"text": ' + _json_string(text) + (', "model": ' + _json_string(model) + "}" if model else "}")
    return {"event": "delta", "data": data, "id": cursor}


def message_event(conversation_id: str, user_message_id: str, reply_id: str, cursor: str) -> dict[str, Any]:
    return sse(
        "message", {"conversation_id": conversation_id, "user_message_id": user_message_id, "reply_id": reply_id}, cursor
    )


def _usage(chunk: TokenChunk) -> dict[str, int]:
    u = chunk.usage
    if u is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "cached_tokens": u.cached_tokens}


async def live(
    tokens: TokenStreams, stream: Stream, head: list[dict[str, Any]], since: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """``head`` events, then the reply's chunks as they arrive, until its last chunk.

    Chunks that queued up behind each other (a replay, or a gateway that fell behind) go out as one
    ``delta`` per run of text of one attempt, with the cursor of its last chunk: the same text and the
    same resume points, and the cost of a chunk on its way out paid once per run, so a gateway that
    falls behind catches up instead of falling further behind. A stream that keeps up sends one
    delta per chunk.

    ``since`` (monotonic, when the POST arrived) makes the first delta an observation of the
    gateway-side TTFT.
    """
    attempt = 0
    try:
        for event in head:
            yield event
        while True:
            chunk = await stream.queue.get()
            texts: list[str] = []  # the run of text not yet sent, its model and the cursor of its last chunk
            model, cursor = "", ""
            while True:
                if chunk is None:  # cut by the gateway's drain (turns.read_live): the reply goes on without us
                    if texts:
                        yield delta("".join(texts), model, cursor)
                    return
                ev = chunk.event
                if ev.attempt >= attempt:  # else a superseded attempt's late chunk
                    if ev.attempt > attempt:
                        if texts:
                            yield delta("".join(texts), model, cursor)
                            texts, model = [], ""
                        yield restarted(chunk)
                        attempt = ev.attempt
                    if ev.text:
                        if since is not None:
                            GATEWAY_TTFT.observe(time.monotonic() - since)
                            since = None
                        texts.append(ev.text)
                        model, cursor = model or ev.model, chunk.cursor
                    if ev.finish_reason is not None:
                        if texts:
                            yield delta("".join(texts), model, cursor)
                        yield final(chunk)
                        return
                if stream.queue.empty():
                    break
                chunk = stream.queue.get_nowait()
            if texts:
                yield delta("".join(texts), model, cursor)
    finally:
        tokens.close_stream(stream)


def final(chunk: Chunk) -> dict[str, Any]:
    """A reply's last chunk as its last event: ``done``, or ``error`` for a reply that failed or was refused."""
    ev = chunk.event
    if ev.finish_reason in ("failed", "rejected"):
        error: dict[str, Any] = {
            "code": ev.error_code or ev.finish_reason,
            "message": client_message(ev.error_code, ev.error_message, ev.finish_reason),
        }
        if ev.retry_after is not None:
            error["retry_after"] = ev.retry_after
        return sse("error", error, chunk.cursor)
    done = {"message_id": ev.request_id, "finish_reason": ev.finish_reason, "usage": _usage(ev), "model": ev.model}
    if ev.finish_reason == "content_filter":  # moderation cut it: the text streamed so far is withdrawn
        done["notice"] = FILTERED_NOTICE
    if ev.citation_status:  # the turn had documents: what the reply cited, or that it cited nothing
        done["citations"] = [asdict(c) for c in ev.citations]
        done["citation_status"] = ev.citation_status
        if ev.documents_note:
            done["documents_note"] = ev.documents_note
    if ev.tool_calls:  # the reply calls the client's functions (an OpenAI turn with tools)
        done["tool_calls"] = tool_calls_json(ev.tool_calls)
    return sse("done", done, chunk.cursor)


def restarted(chunk: Chunk) -> dict[str, Any]:
    """The notice that ``chunk`` begins a new attempt.

    Its cursor is the position just before the chunk: a client that resumes from it reads the
    chunk again and gets this notice again (truncating twice to the same length is harmless),
    so the notice can never be separated from the text that follows it.
    """
    ev = chunk.event
    data = {"message_id": ev.request_id, "attempt": ev.attempt, "offset_chars": ev.offset_chars}
    return sse("restarted", data, f"{chunk.partition}:{chunk.offset - 1}")


def stored(reply: MessageRow, head: list[dict[str, Any]], cursor: str) -> list[dict[str, Any]]:
    """A finished reply from Cassandra, as the events a live stream would have ended with."""
    events = list(head)
    filtered = reply.finish_reason == "content_filter"
    if reply.content and not filtered:
        events.append(sse("delta", {"text": reply.content, **({"model": reply.model} if reply.model else {})}, cursor))
    if reply.status in ("failed", "rejected"):
        events.append(sse("error", {"code": reply.finish_reason or reply.status, "message": f"the generation {reply.status}"}, cursor))
    else:
        usage = {
            "prompt_tokens": reply.prompt_tokens or 0,
            "completion_tokens": reply.tokens or 0,
            "cached_tokens": reply.cached_tokens or 0,
        }
        done = {"message_id": reply.id, "finish_reason": reply.finish_reason, "usage": usage, "model": reply.model or ""}
        if filtered:
            done["notice"] = FILTERED_NOTICE
            if reply.moderation:
                done["moderation"] = reply.moderation
        if reply.citations is not None:
            done["citations"] = reply.citations.get("items", [])
            done["citation_status"] = reply.citations.get("status", "")
        if reply.retrieval and reply.retrieval.get("note"):
            done["documents_note"] = reply.retrieval["note"]
        done.update(reply.tools_json())
        events.append(sse("done", done, cursor))
    return events
