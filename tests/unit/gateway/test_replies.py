"""A reply's SSE events (gateway/replies.py): their bytes on the wire, and a token stream's end."""

from __future__ import annotations

from sse_starlette.event import ensure_bytes

from gateway import replies
from gateway.tokens import Chunk, Stream
from schemas.events import TokenChunk, Usage


def test_events_go_on_the_wire_as_sse_starlette_writes_them() -> None:
    events = [
        replies.message_event("c", "m", "r", "3:-1"),
        replies.sse("delta", {"text": "héllo \"there\"\n\tnext line", "model": "m"}, "3:17"),
        replies.sse("done", {"message_id": "r", "finish_reason": "stop", "usage": {"prompt_tokens": 1}}, "3:18"),
        replies.sse("error", {"code": "gateway_draining", "message": "resume elsewhere"}),
    ]
    for event in events:
        assert replies.wire(event) == ensure_bytes(event, "\r\n")


class _Tokens:
    def __init__(self) -> None:
        self.closed: list[Stream] = []

    def close_stream(self, stream: Stream) -> None:
        self.closed.append(stream)


def _chunk(seq: int, offset: int, **fields: object) -> Chunk:
    event = TokenChunk(conversation_id="c", user_id="u", request_id="r", seq=seq, **fields)  # type: ignore[arg-type]
    return Chunk(event, 3, offset)


async def test_a_stream_ends_with_its_last_chunk_or_where_the_drain_stops_it() -> None:
    tokens = _Tokens()
    done = Stream("r", 3, 10)
    for chunk in (_chunk(0, 10, text="a"), _chunk(1, 11, finish_reason="stop", usage=Usage(completion_tokens=1))):
        done.queue.put_nowait(chunk)
    got = [e async for e in replies.live(tokens, done, [])]  # type: ignore[arg-type]
    assert [(e["event"], e["id"]) for e in got] == [("delta", "3:10"), ("done", "3:11")]

    cut = Stream("r", 3, 10)
    cut.queue.put_nowait(_chunk(0, 10, text="a"))
    cut.queue.put_nowait(None)  # what a drain's on_cut puts there (turns.read_live)
    cut.queue.put_nowait(_chunk(1, 11, text="b"))
    got = [e async for e in replies.live(tokens, cut, [])]  # type: ignore[arg-type]
    assert [(e["event"], e["id"]) for e in got] == [("delta", "3:10")]
    assert tokens.closed == [done, cut]
