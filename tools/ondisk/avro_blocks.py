"""Avro object container files (what ``parley archive`` writes): their data blocks, decompressed.

The format (Avro specification, "Object Container Files")::

    magic "Obj\\x01", metadata map<bytes> (avro.schema, avro.codec, …), 16-byte sync marker,
    then blocks: object count (long), byte size (long), the objects (compressed by the codec), sync

Longs are zigzag varints. The archive writes ``deflate`` blocks (``tools.analysts.archive``), so the
events' text, plain UTF-8 inside the Avro records, is on disk only deflated.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import cramjam

MAGIC = b"Obj\x01"


class Unreadable(ValueError):
    """Not a container file this reader decodes; the message says why."""


def _snappy(block: bytes) -> bytes:
    return bytes(cramjam.snappy.decompress_raw(block[:-4]))  # the last 4 bytes: CRC32 of the uncompressed data


#: avro.codec → block decoder.
CODECS: dict[str, Callable[[bytes], bytes]] = {
    "null": bytes,
    "deflate": lambda b: zlib.decompress(b, -15),  # raw deflate, no zlib header
    "snappy": _snappy,
    "zstandard": lambda b: bytes(cramjam.zstd.decompress(b)),
    "bzip2": bz2.decompress,
    "xz": lzma.decompress,
}


@dataclass(frozen=True)
class Block:
    index: int  # 0 for the first data block
    position: int  # byte offset of the block (its object count) in the file
    end: int  # byte offset after its sync marker
    objects: int
    data: bytes  # decompressed


def blocks(f: BinaryIO) -> Iterator[Block]:
    """The data blocks of a container file, decompressed; Unreadable if it is not one, or is broken."""
    if f.read(4) != MAGIC:
        raise Unreadable("no Avro container magic")
    try:
        metadata = _map(f)
        codec_name = metadata.get("avro.codec", b"null").decode()
        codec = CODECS.get(codec_name)
        if codec is None:
            raise Unreadable(f"codec {codec_name!r} ({', '.join(CODECS)} are decoded)")
        sync = f.read(16)
        index = 0
        while True:
            position = f.tell()
            head = f.read(1)
            if not head:
                return
            objects = _long(f, head)
            size = _long(f)
            stored = f.read(size)
            if len(stored) != size or f.read(16) != sync:
                raise Unreadable(f"block {index} at {position} is truncated or out of sync")
            yield Block(index, position, f.tell(), objects, codec(stored))
            index += 1
    except (EOFError, UnicodeDecodeError, zlib.error, lzma.LZMAError, OSError, cramjam.DecompressionError) as exc:
        raise Unreadable(f"broken container: {exc}") from exc


def _map(f: BinaryIO) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    while count := _long(f):
        if count < 0:  # a negative count is followed by the block's byte size
            count = -count
            _long(f)
        for _ in range(count):
            key = _read(f, _long(f)).decode()
            out[key] = _read(f, _long(f))
    return out


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError("container ends inside its header")
    return data


def _long(f: BinaryIO, first: bytes = b"") -> int:
    shift = result = 0
    byte = first or f.read(1)
    while True:
        if not byte:
            raise EOFError("container ends inside a number")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7
        byte = f.read(1)
