"""bench/fanout.py writes TokenChunk bytes by hand: the codec must read them as the chunks they stand for."""

from __future__ import annotations

from sse_starlette.event import ensure_bytes

from bench.fanout import END, STAMP, ChunkWriter
from gateway.replies import sse
from schemas import codec
from schemas.events import TokenChunk, Usage


def test_hand_written_chunks_decode_as_the_codec_would_write_them() -> None:
    writer = ChunkWriter("c-1", "u-1", "5b2e0a8c-4d1f-5e3a-9c7b-0123456789ab")
    first = codec.decode(writer.chunk(0, "1733066400123456 ", 1733066400123456))
    second = codec.decode(writer.chunk(1, "héllo ", -5))
    last = codec.decode(writer.final(2, 1733066400999999, 2))
    assert isinstance(first, TokenChunk) and isinstance(second, TokenChunk) and isinstance(last, TokenChunk)
    assert (first.conversation_id, first.user_id, first.request_id) == ("c-1", "u-1", "5b2e0a8c-4d1f-5e3a-9c7b-0123456789ab")
    assert (first.seq, first.text, first.occurred_at, first.tokens, first.offset_chars) == (0, "1733066400123456 ", 1733066400123456, 1, 0)
    assert (second.seq, second.text, second.occurred_at, second.offset_chars) == (1, "héllo ", -5, 17)
    assert (first.finish_reason, first.usage, first.replica, first.model, first.attempt) == (None, None, "bench", "", 0)
    assert (last.seq, last.text, last.finish_reason, last.offset_chars) == (2, "", "stop", 23)
    assert last.usage == Usage(prompt_tokens=10, cached_tokens=0, completion_tokens=2)
    assert first.event_id == "5b2e0a8c-4d1f-5e3a-9c7b-000000000000" and second.event_id.endswith("-000000000001")


def test_the_readers_patterns_match_what_the_gateway_sends() -> None:
    delta = sse("delta", {"text": "1733066400123456 "}, "3:17")
    wire = ensure_bytes(delta, "\r\n")  # as the SSE response writes it
    assert STAMP.findall(wire) == [b"1733066400123456"]
    merged = ensure_bytes(sse("delta", {"text": "1733066400123456 1733066400123999 "}, "3:18"), "\r\n")
    assert STAMP.findall(merged) == [b"1733066400123456", b"1733066400123999"]
    assert END.search(b"event: done\r\ndata: {}\r\n") and not END.search(wire)
