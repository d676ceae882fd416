"""Kafka log segments (``<base offset>.log``): the record batches in them, decompressed, and their records.

A segment holds batches back to back in the wire format (magic v2, the only one Kafka 4 writes)::

    baseOffset int64, batchLength int32 (the bytes after it), partitionLeaderEpoch int32, magic int8,
    crc uint32, attributes int16 (bits 0-2: the codec), lastOffsetDelta int32, baseTimestamp int64,
    maxTimestamp int64, producerId int64, producerEpoch int16, baseSequence int32, recordCount int32,
    then the records: one block, compressed as a whole unless the codec is none.

A record: length, attributes int8, timestampDelta, offsetDelta, key and value (each a length, -1 for
null, and its bytes), a header count, each header's key and value — lengths as zigzag varints. The
producers here compress with lz4 (``parley.kafka.producer_config``), so a value's text is on disk only
inside an LZ4 frame: a byte search of the file alone would not see it.
"""

from __future__ import annotations

import bisect
import gzip
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import cramjam

HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61 bytes in front of the records
_LENGTH_PREFIX = 12  # baseOffset and batchLength: what a batch's batchLength does not count
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL = b"\x82SNAPPY\x00"  # snappy-java's stream framing, which Java producers write


class CorruptBatch(ValueError):
    """A batch whose records cannot be decompressed or parsed; the message says how."""


@dataclass(frozen=True)
class Batch:
    position: int  # byte offset of the batch in the segment
    base_offset: int  # Kafka offset of its first record
    magic: int  # record format version: 2 for every batch Kafka 4 writes
    codec: str  # CODECS' name, or "codec <n>" for an id no Kafka defines
    record_count: int
    body: bytes  # the records as stored: compressed unless codec is "none"


def batches(f: BinaryIO) -> Iterator[Batch]:
    """The batches of a segment, from its start, until its end or the first bytes that are no batch
    (the zeroes after an unclean shutdown, a torn last write): those stay for the raw search."""
    position = 0
    while True:
        head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        base_offset, length, _epoch, magic, _crc, attributes, *_rest, count = HEADER.unpack(head)
        if length < HEADER.size - _LENGTH_PREFIX:
            return
        body = f.read(length - (HEADER.size - _LENGTH_PREFIX))
        if len(body) < length - (HEADER.size - _LENGTH_PREFIX):
            return
        # v0/v1 message sets share the first 17 bytes (so magic is found) but not the rest.
        codec = CODECS.get(attributes & 0x07, f"codec {attributes & 0x07}") if magic == 2 else "unknown"
        yield Batch(position, base_offset, magic, codec, count, body)
        position += _LENGTH_PREFIX + length


def decompress(batch: Batch) -> bytes:
    """The batch's records, uncompressed. CorruptBatch if its codec is unknown or its block is broken."""
    if batch.magic != 2:
        raise CorruptBatch(f"record format v{batch.magic}, which this reader does not decode")
    try:
        if batch.codec == "none":
            return batch.body
        if batch.codec == "gzip":
            return gzip.decompress(batch.body)
        if batch.codec == "snappy":
            return _snappy(batch.body)
        if batch.codec == "lz4":
            return bytes(cramjam.lz4.decompress(batch.body))  # the LZ4 frame format
        if batch.codec == "zstd":
            return bytes(cramjam.zstd.decompress(batch.body))
    except (OSError, EOFError, cramjam.DecompressionError) as exc:
        raise CorruptBatch(f"{batch.codec} block does not decompress: {exc}") from exc
    raise CorruptBatch(f"{batch.codec}: no such Kafka compression codec")


def _snappy(data: bytes) -> bytes:
    """Raw snappy (librdkafka) or snappy-java's framing: a 16-byte header, then (int32 length, raw block)*."""
    if not data.startswith(_XERIAL):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, at = [], 16
    while at + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, at)
        out.append(bytes(cramjam.snappy.decompress_raw(data[at + 4 : at + 4 + size])))
        at += 4 + size
    return b"".join(out)


@dataclass(frozen=True)
class Field:
    """Where one part of a record lies in the decompressed records block."""

    start: int
    end: int
    record: int  # index of the record in its batch
    name: str  # "key", "value", "header 0 key", "header 0 value"


def fields(records: bytes) -> list[Field]:
    """The keys, values and headers of every record in an uncompressed records block, in order.
    CorruptBatch if the block does not parse (the caller still searches it whole)."""
    out: list[Field] = []
    at, index = 0, 0
    try:
        while at < len(records):
            length, at = _varint(records, at)
            end = at + length
            pos = at + 1  # attributes
            _, pos = _varint(records, pos)  # timestampDelta
            _, pos = _varint(records, pos)  # offsetDelta
            for name in ("key", "value"):
                pos = _bytes_field(records, pos, index, name, out)
            headers, pos = _varint(records, pos)
            for h in range(headers):
                pos = _bytes_field(records, pos, index, f"header {h} key", out)
                pos = _bytes_field(records, pos, index, f"header {h} value", out)
            if pos != end:
                raise CorruptBatch(f"record {index} is {length} bytes long but its fields end at {pos - at}")
            at, index = end, index + 1
    except IndexError as exc:
        raise CorruptBatch(f"record {index} runs past the end of its batch") from exc
    return out


def locate(parts: list[Field], offset: int) -> str:
    """A hit's place in words: "value of record 17", or "byte 300" between fields."""
    i = bisect.bisect_right([p.start for p in parts], offset) - 1
    if i >= 0 and offset < parts[i].end:
        return f"{parts[i].name} of record {parts[i].record}"
    return f"byte {offset}"


def _bytes_field(buf: bytes, pos: int, record: int, name: str, out: list[Field]) -> int:
    length, pos = _varint(buf, pos)
    if length < 0:  # null
        return pos
    if pos + length > len(buf):
        raise IndexError(name)
    out.append(Field(pos, pos + length, record, name))
    return pos + length


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, position after it)."""
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatch(f"varint longer than 10 bytes at {pos}")
