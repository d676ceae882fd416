"""A reply's SSE events (gateway/replies.py): their bytes on the wire, and a token stream's end."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
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


@given(st.text(), st.text(max_size=20))
def test_a_delta_is_the_event_sse_would_make(text: str, model: str) -> None:
    made = replies.sse("delta", {"text": text, **({"model": model} if model else {})}, "3:17")
    assert replies.delta(text, model, "3:17") == made
    assert replies.wire(made) == ensure_bytes(made, "\r\n")


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


async def test_chunks_that_queued_up_go_out_as_one_delta_per_run_of_one_attempt() -> None:
    """The same text and resume points as a delta per chunk: a run ends at a new attempt and at the end."""
    stream = Stream("r", 3, 10)
    for chunk in (
        _chunk(0, 10, text="Hel", model="m"),
        _chunk(1, 11, text="lo"),
        _chunk(0, 12, attempt=1, text="Hello", offset_chars=0, model="m2"),
        _chunk(2, 13, text=" late"),  # attempt 0 again: superseded, dropped
        _chunk(1, 14, attempt=1, text=" world"),
        _chunk(2, 15, attempt=1, finish_reason="stop", model="m2"),
    ):
        stream.queue.put_nowait(chunk)
    got = [(e["event"], json.loads(e["data"]), e.get("id")) async for e in replies.live(_Tokens(), stream, [])]  # type: ignore[arg-type]
    assert [(kind, cursor) for kind, _, cursor in got] == [("delta", "3:11"), ("restarted", "3:11"), ("delta", "3:14"), ("done", "3:15")]
    assert got[0][1] == {"text": "Hello", "model": "m"} and got[2][1] == {"text": "Hello world", "model": "m2"}
    assert got[1][1] == {"message_id": "r", "attempt": 1, "offset_chars": 0}


async def test_a_stream_that_keeps_up_sends_a_delta_per_chunk() -> None:
    stream = Stream("r", 3, 10)
    reader = replies.live(_Tokens(), stream, [])  # type: ignore[arg-type]
    for offset, text in ((10, "a"), (11, "b")):
        stream.queue.put_nowait(_chunk(offset - 10, offset, text=text))
        event = await anext(reader)
        assert (event["event"], json.loads(event["data"])["text"], event["id"]) == ("delta", text, f"3:{offset}")
    await reader.aclose()


def test_an_engine_failure_reaches_the_client_as_its_code_and_parleys_words_alone() -> None:
    leaked = "the engine is unavailable: engine at http://10.0.3.7:30000 unreachable: ConnectError"
    failed = replies.final(_chunk(9, 40, finish_reason="failed", error_code="engine_unavailable", error_message=leaked))
    assert failed["event"] == "error" and json.loads(failed["data"])["code"] == "engine_unavailable"
    assert "10.0.3.7" not in failed["data"] and "engine at" not in failed["data"]
    # The router's and the context builder's messages are Parley's own, for the client: they go through.
    own = "model 'gpt-9' is not served here"
    rejected = replies.final(_chunk(0, 41, finish_reason="rejected", error_code="unknown_model", error_message=own))
    assert json.loads(rejected["data"])["message"] == own
