"""gateway/chunk_reader.py reads the current TokenChunk schema by hand: it must agree with the codec
on every chunk, refuse what the codec refuses, and skip only what no stream wants."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import chunk_reader
from schemas import codec
from schemas.events import FINISH_REASONS, GenerationCancelRequested, TokenChunk, Usage

text = st.text(max_size=40)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
chunks = st.builds(
    TokenChunk,
    event_id=text, occurred_at=longs, trace_id=text, conversation_id=text, user_id=text, request_id=text,
    attempt=longs, seq=longs, text=st.text(max_size=300), tokens=longs, offset_chars=longs,
    finish_reason=st.none() | st.sampled_from(sorted(FINISH_REASONS)),
    usage=st.none() | st.builds(Usage, prompt_tokens=longs, cached_tokens=longs, completion_tokens=longs),
    replica=text, model=text, error_code=st.none() | text, error_message=st.none() | text,
    retry_after=st.none() | st.floats(allow_nan=False),
)


def test_it_is_written_for_the_current_schema() -> None:
    """A changed TokenChunk schema has a new fingerprint: update the reader (its FIELDS and FINGERPRINT)."""
    fingerprint, _ = codec.default_schemas().current["TokenChunk"]
    with open(codec.AVRO_DIR / "TokenChunk.avsc") as f:
        fields = tuple(field["name"] for field in json.load(f)["fields"])
    assert (chunk_reader.FINGERPRINT, chunk_reader.FIELDS) == (fingerprint, fields)


@settings(max_examples=300, deadline=None)
@given(chunks)
def test_every_chunk_reads_as_the_codec_reads_it(chunk: TokenChunk) -> None:
    data = codec.encode(chunk)
    read = chunk_reader.read(data, {chunk.request_id})
    assert read == codec.decode(data) == chunk
    assert (type(read), vars(read), repr(read)) == (TokenChunk, vars(chunk), repr(chunk))


@settings(max_examples=100, deadline=None)
@given(chunks)
def test_a_chunk_no_stream_wants_is_skipped(chunk: TokenChunk) -> None:
    assert chunk_reader.read(codec.encode(chunk), {chunk.request_id + "-other"}) is None


@settings(max_examples=300, deadline=None)
@given(chunks, st.data())
def test_damaged_bytes_are_refused_or_read_as_the_codec_reads_them(chunk: TokenChunk, data: st.DataObject) -> None:
    good = codec.encode(chunk)
    cut = data.draw(st.integers(min_value=codec.HEADER_LEN, max_value=len(good)))
    flip = data.draw(st.integers(min_value=codec.HEADER_LEN, max_value=len(good) - 1))
    for bad in (good[:cut], good[:flip] + bytes([good[flip] ^ 0xFF]) + good[flip + 1:], good + b"\x00"):
        try:
            expected = codec.decode(bad)
        except codec.CodecError:
            with pytest.raises(codec.CodecError):
                chunk_reader.read(bad, {chunk.request_id})
        else:
            got = chunk_reader.read(bad, {expected.request_id})  # type: ignore[attr-defined]
            assert repr(got) == repr(expected)  # repr: a flipped byte can make retry_after NaN, never == itself


def test_other_events_and_other_bytes_take_the_codec_s_way() -> None:
    cancel = GenerationCancelRequested(conversation_id="c", user_id="u", request_id="r", reason="user")
    assert chunk_reader.read(codec.encode(cancel), set()) == cancel
    for bad in (None, b"", b"\xc3\x01", b"not avro at all"):
        with pytest.raises(codec.CodecError):
            chunk_reader.read(bad, set())
    data = codec.encode(TokenChunk(conversation_id="c", user_id="u", request_id="r", seq=0, finish_reason="stop"))
    bogus = data.replace(b"\x02\x08stop", b"\x02\x06nah")  # finish_reason "nah": it parses, but is no event
    with pytest.raises(codec.InvalidEvent):
        codec.decode(bogus)
    with pytest.raises(codec.InvalidEvent):
        chunk_reader.read(bogus, {"r"})
