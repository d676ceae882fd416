"""Cassandra SSTable data files (``*-Data.db``), decompressed chunk by chunk.

A compressed ``Data.db`` is the uncompressed data cut into ``chunk_length`` pieces, each compressed
alone and followed by its CRC32 (4 bytes). ``CompressionInfo.db`` beside it says how, in Java's
``DataOutput`` encoding (CompressionMetadata.java, format "na" and later; Cassandra 5 writes "oa" or
BTI "da")::

    compressor class name (writeUTF: uint16 length, modified UTF-8), option count int32,
    (key, value)* (writeUTF each), chunk length int32, max compressed length int32,
    uncompressed data length int64, chunk count int32, chunk offsets int64*

A chunk whose stored length is at least the max compressed length was kept uncompressed (it did not
shrink enough: ``min_compress_ratio``). LZ4Compressor, the default, stores a chunk as a 4-byte
little-endian uncompressed length and an LZ4 *block*. Strings are stored UTF-8, so after
decompression a text value is a plain byte run (but may straddle two chunks).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cramjam

#: ``<version>-<generation>-<format>-Data.db``: e.g. oa-1-big-Data.db, da-3gv1_0aa1_2sgk02i0x4kqbvhr7n-bti-Data.db.
DATA_NAME = re.compile(r"^(?P<version>[a-z]{2})-(?P<generation>[^-]+)-(?P<format>big|bti)-Data\.db$")


class Unreadable(ValueError):
    """An SSTable this reader cannot decompress; the message says why."""


#: Compressor class (simple name) → chunk decoder.
DECODERS: dict[str, Callable[[bytes], bytes]] = {
    "LZ4Compressor": lambda c: bytes(cramjam.lz4.decompress_block(c)),  # reads the 4-byte LE length itself
    "SnappyCompressor": lambda c: bytes(cramjam.snappy.decompress_raw(c)),
    "DeflateCompressor": zlib.decompress,  # java.util.zip.Deflater's default: zlib-wrapped
    "ZstdCompressor": lambda c: bytes(cramjam.zstd.decompress(c)),
    "NoopCompressor": bytes,
}


@dataclass(frozen=True)
class CompressionInfo:
    compressor: str  # class name without its package, e.g. "LZ4Compressor"
    options: dict[str, str]
    chunk_length: int  # uncompressed bytes per chunk
    max_compressed_length: int  # a chunk stored at least this long is not compressed
    data_length: int  # uncompressed bytes in all
    offsets: tuple[int, ...]  # where each chunk starts in Data.db


def compression_info_of(data: Path) -> Path:
    return data.with_name(data.name.removesuffix("Data.db") + "CompressionInfo.db")


def has_max_compressed_length(data: Path) -> bool:
    """Formats before "na" (Cassandra 3.x) wrote no max compressed length."""
    m = DATA_NAME.match(data.name)
    return m is None or m["format"] == "bti" or m["version"] >= "na"


def read_compression_info(path: Path, with_max_length: bool = True) -> CompressionInfo:
    buf = path.read_bytes()
    try:
        at = 0

        def utf() -> str:
            nonlocal at
            (n,) = struct.unpack_from(">H", buf, at)
            at += 2 + n
            return buf[at - n : at].decode("utf-8", errors="replace")

        def num(fmt: str) -> int:
            nonlocal at
            (v,) = struct.unpack_from(fmt, buf, at)
            at += struct.calcsize(fmt)
            return int(v)

        compressor = utf().rsplit(".", 1)[-1]
        options = {utf(): utf() for _ in range(num(">i"))}
        chunk_length = num(">i")
        max_length = num(">i") if with_max_length else 2**31 - 1
        data_length = num(">q")
        count = num(">i")
        offsets = struct.unpack_from(f">{count}q", buf, at)
    except struct.error as exc:
        raise Unreadable(f"{path.name} is shorter than its header says ({len(buf)} bytes)") from exc
    return CompressionInfo(compressor, options, chunk_length, max_length, data_length, offsets)


def chunks(data: Path, info: CompressionInfo) -> Iterator[bytes]:
    """The uncompressed chunks of ``data``, in order. Unreadable for an unknown compressor or a bad chunk."""
    decode = DECODERS.get(info.compressor)
    if decode is None:
        raise Unreadable(f"compressor {info.compressor} ({', '.join(DECODERS)} are decoded)")
    with data.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        ends = (*info.offsets[1:], size)
        for i, (start, end) in enumerate(zip(info.offsets, ends)):
            f.seek(start)
            stored = f.read(end - start - 4)  # the last 4 bytes: the chunk's CRC32
            if len(stored) != end - start - 4:
                raise Unreadable(f"chunk {i} at {start} runs past the end of the file")
            if len(stored) >= info.max_compressed_length:
                yield stored
                continue
            try:
                yield decode(stored)
            except (zlib.error, cramjam.DecompressionError) as exc:
                raise Unreadable(f"chunk {i} at {start} does not decompress with {info.compressor}: {exc}") from exc
