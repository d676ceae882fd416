"""Starting a reply and reading one: what posting, regenerating and resuming share.

A new reply: note the end of the conversation's ``chat.tokens`` partition, open
a stream there, append the events, write the new rows through (the same writes
the materializer makes, so the caller reads them back at once), then stream.
A stream that ends before its reply does (the client went away) starts an
abandonment watch: if no reader touched the reply within the grace period, the
generation is cancelled with reason ``abandoned``.
"""

from __future__ import annotations

import asyncio
import time
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.responses import Response
from starlette.types import Message, Send

from gateway import replies
from gateway.drain import is_cut, until_cut
from gateway.errors import BadRequest, ServiceUnavailable
from gateway.replay import open_replay
from gateway.services import Services
from gateway.store import MessageRow
from gateway.tokens import Stream
from parley.errors import Unavailable
from schemas.events import ConversationEvent, GenerationCancelRequested, GenerationRequested

log = logging.getLogger(__name__)


async def start_reply(
    svc: Services, events: list[ConversationEvent], request: GenerationRequested, user_message_id: str
) -> Response:
    """Append ``events`` (the last is ``request``, its token_offset to be filled) and stream the reply."""
    return sse(svc, await open_reply(svc, events, request, user_message_id))


async def open_reply(
    svc: Services, events: list[ConversationEvent], request: GenerationRequested, user_message_id: str
) -> AsyncIterator[dict[str, Any]]:
    """``start_reply`` without the SSE response: the reply's events, for another wire format."""
    arrived = time.monotonic()
    svc.admit_stream(appends=True)
    svc.admit_tier(request.tier)
    partition = svc.tokens.partition_of(request.conversation_id)
    noted = await _end_of(svc, partition)
    stream = svc.tokens.open(request.request_id, partition, noted)
    # The user's arm of a running experiment (gateway/experiments.py), recorded on the turn for the router and
    # the analysts; a retried or resumed turn keeps what its first append carried.
    arm = svc.experiments.assignment(request.user_id, request.tier) if svc.experiments is not None else None
    events = [*events[:-1], replace(request, token_offset=noted, experiment=request.experiment or arm)]
    try:
        await svc.append(*events)
    except BaseException:
        svc.tokens.close_stream(stream)
        raise
    await svc.write_through(*events)
    head = [replies.message_event(request.conversation_id, user_message_id, request.request_id, f"{partition}:{noted - 1}")]
    return read_live(svc, stream, head, request.conversation_id, request.user_id, since=arrived)


_CURSOR = re.compile(r"([0-9]{1,9}):(-1|[0-9]{1,18})")


def parse_cursor(value: str | None, partition: int) -> int | None:
    """The offset after a ``partition:offset`` cursor; None without one; 400 when it is not ours."""
    if value is None or value == "":
        return None
    # ASCII digits only (str.isdigit takes "²", which int() refuses), and an offset a Kafka
    # position can hold: anything else is not a cursor this API sent.
    found = _CURSOR.fullmatch(value)
    if found is None:
        raise BadRequest("`Last-Event-ID` is not a cursor this API sent (`partition:offset`)", code="bad_cursor")
    if int(found[1]) != partition:
        raise BadRequest("`Last-Event-ID` belongs to another conversation", code="bad_cursor")
    return int(found[2]) + 1


#: A resume this many records or more behind its partition's end is read on a consumer of its own
#: (gateway/replay.py): seeking the shared reader back that far would stall every other stream on it.
SHARED_REWIND_MAX = 1_000


async def _end_of(svc: Services, partition: int) -> int:
    try:
        return await asyncio.wait_for(svc.tokens.note_end(partition), svc.settings.append_timeout_s)
    except (Unavailable, asyncio.TimeoutError) as exc:
        raise ServiceUnavailable(
            "the token stream is unavailable; retry shortly", code="log_unavailable", retry_after=svc.settings.retry_after_s
        ) from exc


async def resume(
    svc: Services, conversation_id: str, user_id: str, user_message_id: str, reply: MessageRow, after: str | None
) -> Response:
    """A reply's stream: after a cursor, or from its start; a finished reply without a cursor from storage.

    After a cursor the rest comes from ``chat.tokens`` (kept a day), finished or not: only the log
    knows which text follows that exact position. The cursor is bounded: one before the reply began
    reads from its start, one past the partition's end is refused, and a finished reply's replay ends
    at that end (with the stored outcome when the cursor was past its last chunk).
    """
    return sse(svc, await resume_events(svc, conversation_id, user_id, user_message_id, reply, after))


async def resume_events(
    svc: Services, conversation_id: str, user_id: str, user_message_id: str, reply: MessageRow, after: str | None
) -> AsyncIterator[dict[str, Any]]:
    """``resume`` without the SSE response: the reply's events, for another wire format."""
    partition = svc.tokens.partition_of(conversation_id)
    offset = parse_cursor(after, partition)
    start = reply.stream_offset if reply.stream_offset is not None and reply.stream_offset >= 0 else 0
    if offset is not None:
        return await _after_cursor(svc, conversation_id, user_id, reply, partition, max(offset, start))
    cursor = f"{partition}:{start - 1}"
    head = [replies.message_event(conversation_id, user_message_id, reply.id, cursor)]
    if reply.status in replies.FINISHED:
        return _iterate(replies.stored(reply, head, cursor))
    svc.admit_stream(appends=False)
    return read_live(svc, svc.tokens.open(reply.id, partition, start), head, conversation_id, user_id)


async def _after_cursor(
    svc: Services, conversation_id: str, user_id: str, reply: MessageRow, partition: int, offset: int
) -> AsyncIterator[dict[str, Any]]:
    """The reply after ``offset`` (already at or after the reply's first chunk)."""
    end = await _end_of(svc, partition)
    if offset > end:
        raise BadRequest("`Last-Event-ID` is past the end of the reply's log: not a cursor this API sent", code="bad_cursor")
    if reply.finish_reason == "content_filter":
        return _iterate(replies.stored(reply, [], f"{partition}:{end - 1}"))  # the notice; never the withdrawn text again
    svc.admit_stream(appends=False)
    if reply.status in replies.FINISHED:
        # Everything the reply wrote lies before the end noted now: the replay stops there.
        stream = open_replay(svc.tokens.kafka, reply.id, partition, offset, until=end)
        return _finished_replay(svc, stream, reply, f"{partition}:{end - 1}")
    if end - offset >= SHARED_REWIND_MAX:
        stream = open_replay(svc.tokens.kafka, reply.id, partition, offset, until=None)
    else:
        stream = svc.tokens.open(reply.id, partition, offset)
    return read_live(svc, stream, [], conversation_id, user_id)


async def _finished_replay(svc: Services, stream: Stream, reply: MessageRow, cursor: str) -> AsyncIterator[dict[str, Any]]:
    """A finished reply's chunks after the cursor; its stored outcome when the cursor was past its last chunk."""
    ended = False
    async for event in replies.live(svc.tokens, stream, []):
        ended = ended or event["event"] in ("done", "error")
        yield event
    if not ended:
        yield replies.stored(reply, [], cursor)[-1]


async def read_live(
    svc: Services,
    stream: Stream,
    head: list[dict[str, Any]],
    conversation_id: str,
    user_id: str,
    since: float | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The live reply, touching its reader mark; an early end starts an abandonment watch.

    A drain past its deadline ends it with a ``gateway_draining`` error: the reply goes on, and
    the client resumes it on another gateway (nobody resuming it is an abandonment as any other).
    """
    finished = False
    toucher = asyncio.create_task(_touch(svc, stream.request_id))
    events = until_cut(replies.live(svc.tokens, stream, head, since), svc.drain, svc.settings.retry_after_s)
    try:
        with svc.drain.stream(on_cut=lambda: stream.queue.put_nowait(None)):
            async for event in events:
                yield event
                if event["event"] in ("done", "error") and not is_cut(event):
                    finished = True
    finally:
        toucher.cancel()
        await events.aclose()  # at once, not when the collector finds it: it closes the token stream
        if not finished:
            left = datetime.now(timezone.utc)
            svc.spawn(_watch_abandonment(svc, stream.request_id, conversation_id, user_id, left))


async def _touch(svc: Services, request_id: str) -> None:
    period = max(0.5, svc.settings.abandon_grace_s / 3)
    while True:
        try:
            await svc.store.touch_reader(request_id, datetime.now(timezone.utc))
        except Unavailable:
            pass  # without Cassandra nobody is declared abandoned either: the watch errs on keeping it
        await asyncio.sleep(period)


async def _watch_abandonment(svc: Services, request_id: str, conversation_id: str, user_id: str, left: datetime) -> None:
    await asyncio.sleep(svc.settings.abandon_grace_s)
    try:
        found = await svc.store.message(conversation_id, request_id)
        if found is not None and found.status in replies.FINISHED:
            return
        last = await svc.store.last_reader(request_id)
        if last is not None and last > left:
            return  # someone (here or on another gateway) resumed it since
        await svc.append(
            GenerationCancelRequested(conversation_id=conversation_id, user_id=user_id, request_id=request_id, reason="abandoned")
        )
        log.info("cancelled an abandoned reply", extra={"request_id": request_id})
    except Exception as exc:  # the watch is best effort: never let it take the process down
        log.warning("abandonment watch failed", extra={"request_id": request_id, "error": type(exc).__name__})


async def _iterate(events: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        yield event


def sse(svc: Services, events: AsyncIterator[dict[str, Any]]) -> Response:
    return _EventSource(
        _wire(events), ping=svc.settings.stream_ping_s, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )


async def _wire(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield replies.wire(event)
    finally:  # the response went away: end the reply's reader now, not when the collector finds it
        closer = getattr(events, "aclose", None)
        if closer is not None:
            await closer()


class _EventSource(EventSourceResponse):
    """sse-starlette's response without its cancel scope around every send, which only serves a
    ``send_timeout`` (never set here) and cost more than the rest of a chunk's way out of the
    process (bench/fanout.py)."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        await send(message)
