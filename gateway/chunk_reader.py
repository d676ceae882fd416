"""TokenChunk records read for the gateway's fan-out: the request id first, the rest only if a stream wants it.

The gateway reads every record of each ``chat.tokens`` partition it holds a
stream on, most of them other gateways' replies, and decodes every one it
keeps: at thousands of chunks a second the generic ``codec.decode`` (fastavro,
then a dataclass built from a dict) was the largest cost of its event loop.
This reads the Avro body of the *current* TokenChunk schema field by field,
stops after ``request_id`` when no stream here wants it, and builds the same
TokenChunk ``codec.decode`` would (its checks included). Anything else (another
event, an older TokenChunk schema, bytes that are not ours) goes to
``codec.decode``, so schema resolution still happens in one place.

The reader is written for one fingerprint (``FINGERPRINT``): when TokenChunk's
schema changes, records under the new one take the codec's way until this file
is updated, and a unit test fails until then.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Container
from typing import TypeVar

from schemas import codec, sealing
from schemas.events import Citation, Event, TokenChunk, ToolCall, Usage

T = TypeVar("T")

#: CRC-64-AVRO of the TokenChunk schema this reader is written for (``schemas/avro/TokenChunk.avsc``).
FINGERPRINT = bytes.fromhex("e05cb8ce28c73daa")
#: The fields in the order ``read`` takes them (a unit test compares them with the schema).
FIELDS = (
    "event_id", "occurred_at", "trace_id", "conversation_id", "user_id", "request_id", "attempt", "seq", "text",
    "tokens", "offset_chars", "finish_reason", "usage", "replica", "model", "error_code", "error_message", "retry_after",
    "citations", "citation_status", "documents_note", "tool_calls",
)
_DOUBLE = struct.Struct("<d")
_new = object.__new__


class _Skip(Exception):
    """No stream wants this record."""


def read(value: bytes | None, wanted: Container[str]) -> Event | None:
    """The event in ``value``; None for a current-schema TokenChunk whose request id is not in ``wanted``.

    Raises what ``codec.decode`` raises (``codec.CodecError``) for bytes it cannot read.
    """
    if value is None or value[2:10] != FINGERPRINT or value[:2] != codec.MAGIC:
        return codec.decode(value)
    try:
        return _token_chunk(value, wanted)
    except _Skip:
        return None
    except (IndexError, UnicodeDecodeError, struct.error) as exc:
        raise codec.Undecodable(f"TokenChunk body does not parse: {type(exc).__name__}") from exc
    except (ValueError, TypeError) as exc:
        raise codec.InvalidEvent(f"TokenChunk: {exc}") from exc


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:  # one byte: -64..63, every small count and flag
        return (b >> 1) ^ -(b & 1), pos + 1
    n, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos + 1
        shift += 7
        if shift > 63:
            raise codec.Undecodable("TokenChunk body has a long of more than 10 bytes")


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = _long(buf, pos)
    end = pos + n
    if n < 0 or end > len(buf):
        raise codec.Undecodable("TokenChunk body has a string past its end")
    return buf[pos:end].decode(), end


def _branch(buf: bytes, pos: int) -> tuple[bool, int]:
    """A ``["null", X]`` union's branch: True for X."""
    index, pos = _long(buf, pos)
    if index not in (0, 1):
        raise codec.Undecodable(f"TokenChunk body has union branch {index}")
    return index == 1, pos


def _optional_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    present, pos = _branch(buf, pos)
    return _string(buf, pos) if present else (None, pos)


def _array(buf: bytes, pos: int, item: Callable[[bytes, int], tuple[T, int]]) -> tuple[list[T], int]:
    """An Avro array of records read by ``item``: blocks of items, each block's count first (negative: its
    byte size follows), ended by an empty block."""
    out: list[T] = []
    while True:
        count, pos = _long(buf, pos)
        if count == 0:
            return out, pos
        if count < 0:
            count = -count
            _, pos = _long(buf, pos)
        for _ in range(count):
            value, pos = item(buf, pos)
            out.append(value)


def _citation(buf: bytes, pos: int, event_id: str) -> tuple[Citation, int]:
    """One Citation record (only a reply's last chunk has any)."""
    number, pos = _long(buf, pos)
    document_id, pos = _string(buf, pos)
    page, pos = _long(buf, pos)
    chunk_id, pos = _string(buf, pos)
    text, pos = _string(buf, pos)
    filename, pos = _string(buf, pos)
    citation = Citation(number=number, document_id=document_id, page=page, chunk_id=chunk_id,
                        text=_open(text, "citations.text", event_id),
                        filename=_open(filename, "citations.filename", event_id))  # fmt: skip
    return citation, pos


def _tool_call(buf: bytes, pos: int, event_id: str) -> tuple[ToolCall, int]:
    """One ToolCall record (only a reply's last chunk has any)."""
    call_id, pos = _string(buf, pos)
    name, pos = _string(buf, pos)
    arguments, pos = _string(buf, pos)
    return ToolCall(id=call_id, name=name, arguments=_open(arguments, "tool_calls.arguments", event_id)), pos


def _open(value: str, path: str, event_id: str) -> str:
    """A sealed field's text, opened at its place (schemas/sealing.py: the codec's way opens the same fields)."""
    if not sealing.is_sealed(value):
        return value
    return sealing.open_text(value, at=sealing.field_at("TokenChunk", path, event_id)) or ""


def _token_chunk(buf: bytes, wanted: Container[str]) -> TokenChunk:
    pos = codec.HEADER_LEN
    event_id, pos = _string(buf, pos)
    occurred_at, pos = _long(buf, pos)
    trace_id, pos = _string(buf, pos)
    conversation_id, pos = _string(buf, pos)
    user_id, pos = _string(buf, pos)
    request_id, pos = _string(buf, pos)
    if request_id not in wanted:
        raise _Skip
    attempt, pos = _long(buf, pos)
    seq, pos = _long(buf, pos)
    text, pos = _string(buf, pos)
    tokens, pos = _long(buf, pos)
    offset_chars, pos = _long(buf, pos)
    finish_reason, pos = _optional_string(buf, pos)
    present, pos = _branch(buf, pos)
    usage = None
    if present:
        prompt_tokens, pos = _long(buf, pos)
        cached_tokens, pos = _long(buf, pos)
        completion_tokens, pos = _long(buf, pos)
        usage = Usage(prompt_tokens=prompt_tokens, cached_tokens=cached_tokens, completion_tokens=completion_tokens)
    replica, pos = _string(buf, pos)
    model, pos = _string(buf, pos)
    error_code, pos = _optional_string(buf, pos)
    error_message, pos = _optional_string(buf, pos)
    present, pos = _branch(buf, pos)
    retry_after = None
    if present:
        (retry_after,) = _DOUBLE.unpack_from(buf, pos)
        pos += _DOUBLE.size
    citations, pos = _array(buf, pos, lambda b, p: _citation(b, p, event_id))
    citation_status, pos = _string(buf, pos)
    documents_note, pos = _string(buf, pos)
    tool_calls, pos = _array(buf, pos, lambda b, p: _tool_call(b, p, event_id))
    if pos != len(buf):
        raise codec.Undecodable("TokenChunk body has trailing bytes")
    # Every field set at once, then the type's own checks: what TokenChunk(**fields) does, at half the cost
    # (its generated __init__ sets eighteen fields one object.__setattr__ at a time).
    chunk = _new(TokenChunk)
    vars(chunk).update(
        event_id=event_id, occurred_at=occurred_at, trace_id=trace_id, conversation_id=conversation_id, user_id=user_id,
        request_id=request_id, attempt=attempt, seq=seq, text=_open(text, "text", event_id), tokens=tokens, offset_chars=offset_chars,
        finish_reason=finish_reason, usage=usage, replica=replica, model=model, error_code=error_code,
        error_message=error_message, retry_after=retry_after, citations=citations, citation_status=citation_status,
        documents_note=_open(documents_note, "documents_note", event_id), tool_calls=tool_calls,
    )
    chunk.__post_init__()
    return chunk
