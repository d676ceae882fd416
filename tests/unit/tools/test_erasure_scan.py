"""The erasure scanner on files built here the way each store writes them.

Each format is built to its specification (Kafka's record batch v2, Cassandra's CompressionInfo.db and
chunks, Avro containers by the archive's own encoder, Parquet by replay's own writer), with a canary
inside, so a test fails if the scanner does not decode what it claims to: several canaries are
checked to be absent from the raw bytes first.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import uuid
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reportlab.pdfgen import canvas

from tools.analysts import archive, replay, sample, turns
from tools.analysts.logread import Raw
from tools.erasure_scan import Finding, _files, classify, scan
from tools.ondisk import containers, kafka_segments, sstables
from tools.ondisk.search import Needles

FILLER = b"the quick brown fox jumps over the lazy dog; " * 40  # compressible: codecs really compress


def canary() -> bytes:
    return f"canary-{uuid.uuid4().hex}".encode()


def places(findings: list[Finding]) -> list[tuple[str, str, int, str]]:
    return [(f.store, f.path.name, f.needle, f.where) for f in findings]


# --- the search ------------------------------------------------------------------------------------


@given(
    before=st.binary(max_size=200),
    after=st.binary(max_size=200),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=8),
)
def test_a_needle_is_found_once_at_its_offset_however_the_stream_is_cut(before: bytes, after: bytes, cuts: list[int]) -> None:
    needle = b"\xffNEEDLE\xfe"
    data = before + needle + after
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    assert list(Needles([needle]).stream(iter(chunks))) == [(0, len(before))]


def test_overlapping_occurrences_and_every_needle_are_found() -> None:
    hits = list(Needles([b"aa", b"ab"]).stream(iter([b"aa", b"ab", b"a"])))
    assert sorted(hits) == [(0, 0), (0, 1), (1, 2)]


def test_an_empty_needle_is_refused() -> None:
    with pytest.raises(ValueError):
        Needles([b"x", b""])


# --- Kafka segments --------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte, z = z & 0x7F, z >> 7
        out.append(byte | (0x80 if z else 0))
        if not z:
            return bytes(out)


def _blob(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def _record(i: int, key: bytes | None, value: bytes | None, headers: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    body = b"\x00" + _varint(0) + _varint(i) + _blob(key) + _blob(value) + _varint(len(headers))
    body += b"".join(_blob(k) + _blob(v) for k, v in headers)
    return _varint(len(body)) + body


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "none": bytes,
    "gzip": gzip.compress,
    "snappy": lambda b: bytes(cramjam.snappy.compress_raw(b)),
    "lz4": lambda b: bytes(cramjam.lz4.compress(b)),
    "zstd": lambda b: bytes(cramjam.zstd.compress(b)),
}


def kafka_batch(base: int, records: list[tuple], codec: str = "lz4", codec_id: int | None = None) -> bytes:
    """A record batch v2 as a broker stores it (its CRC is not checked by the scanner, so left 0)."""
    raw = b"".join(_record(i, *r) for i, r in enumerate(records))
    body = COMPRESS[codec](raw)
    attributes = CODEC_IDS[codec] if codec_id is None else codec_id
    after_length = struct.pack(">ibIhiqqqhii", 0, 2, 0, attributes, len(records) - 1, 0, 0, -1, -1, -1, len(records))
    return struct.pack(">qi", base, len(after_length) + len(body)) + after_length + body


def segment(tmp_path: Path, *batches: bytes, tail: bytes = b"") -> Path:
    path = tmp_path / "kafka" / "data" / "chat.events-3" / f"{0:020d}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(batches) + tail)
    return path


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_batches_parse_and_decompress_to_their_records(codec: str) -> None:
    first = kafka_batch(0, [(b"k0", b"v0"), (None, b"v1", ((b"h", b"hv"),))], codec)
    second = kafka_batch(2, [(b"k2", None)], codec)
    found = list(kafka_segments.batches(io.BytesIO(first + second + b"\0" * 100)))
    assert [(b.position, b.base_offset, b.codec, b.record_count) for b in found] == [(0, 0, codec, 2), (len(first), 2, codec, 1)]
    records = kafka_segments.decompress(found[0])
    parts = kafka_segments.fields(records)
    assert [(p.record, p.name, records[p.start : p.end]) for p in parts] == [
        (0, "key", b"k0"), (0, "value", b"v0"), (1, "value", b"v1"), (1, "header 0 key", b"h"), (1, "header 0 value", b"hv"),
    ]
    assert kafka_segments.locate(parts, parts[2].start) == "value of record 1"


def test_a_canary_in_a_compressed_batch_is_found_where_a_byte_search_sees_nothing(tmp_path: Path) -> None:
    secret = canary()
    path = segment(tmp_path, kafka_batch(0, [(b"k", FILLER)], "lz4"), kafka_batch(1, [(b"k", FILLER + secret + FILLER)], "gzip"))
    assert secret not in path.read_bytes()
    report = scan(tmp_path, [secret, canary()])
    size = len(kafka_batch(0, [(b"k", FILLER)], "lz4"))
    assert places(report.findings) == [("kafka", path.name, 0, f"value of record 0 of gzip batch at {size} (offset 1)")]
    assert report.scanned["kafka"] == 1 and report.unscannable == []


def test_uncompressed_batches_and_bytes_outside_any_batch_are_searched_once(tmp_path: Path) -> None:
    secret, torn = canary(), canary()
    plain = kafka_batch(0, [(secret, b"v")], "none")
    path = segment(tmp_path, plain, tail=b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x01" + torn)  # a torn last write
    report = scan(tmp_path, [secret, torn])
    assert places(report.findings) == [
        ("kafka", path.name, 0, "key of record 0 of none batch at 0 (offset 0)"),
        ("kafka", path.name, 1, f"offset {len(plain) + 10}"),
    ]


def test_a_batch_that_cannot_be_decoded_is_reported_and_searched_raw(tmp_path: Path) -> None:
    secret = canary()
    unknown = kafka_batch(0, [(b"k", secret)], "none", codec_id=6)  # no Kafka codec has id 6
    broken = bytearray(kafka_batch(1, [(b"k", FILLER)], "lz4"))
    broken[-20:] = b"\xff" * 20
    path = segment(tmp_path, unknown, bytes(broken))
    report = scan(tmp_path, [secret])
    assert places(report.findings) == [("kafka", path.name, 0, f"offset {len(unknown) - len(secret) - 1}")]  # then the header count
    assert [(p.name, why.split(":")[0]) for p, why in report.unscannable] == [
        (path.name, "batch at 0 (offset 0)"), (path.name, f"batch at {len(unknown)} (offset 1)"),
    ]
    assert "codec 6" in report.unscannable[0][1] and "lz4" in report.unscannable[1][1]


# --- Cassandra SSTables ----------------------------------------------------------------------------


def _utf(s: str) -> bytes:
    return struct.pack(">H", len(s.encode())) + s.encode()


def sstable(
    folder: Path,
    payload: bytes,
    chunk_length: int,
    compressor: str = "LZ4Compressor",
    encode: Callable[[bytes], bytes] = lambda c: bytes(cramjam.lz4.compress_block(c, store_size=True)),
    max_compressed_length: int = 2**31 - 1,
) -> Path:
    """Data.db and CompressionInfo.db as Cassandra 5 writes them (CompressedSequentialWriter)."""
    folder.mkdir(parents=True, exist_ok=True)
    data, offsets = bytearray(), []
    for start in range(0, len(payload), chunk_length):
        stored = payload[start : start + chunk_length]
        if len(encode(stored)) < max_compressed_length:
            stored = encode(stored)
        offsets.append(len(data))
        data += stored + zlib.crc32(stored).to_bytes(4, "big")
    info = _utf(compressor) + struct.pack(">i", 1) + _utf("chunk_length_in_kb") + _utf("16")
    info += struct.pack(">iiqi", chunk_length, max_compressed_length, len(payload), len(offsets))
    info += struct.pack(f">{len(offsets)}q", *offsets)
    path = folder / "oa-7-big-Data.db"
    path.write_bytes(bytes(data))
    (folder / "oa-7-big-CompressionInfo.db").write_bytes(info)
    return path


TABLE = Path("cassandra") / "data" / "data" / "parley" / "messages-0123"


@pytest.mark.parametrize(
    "compressor, encode",
    [
        ("LZ4Compressor", lambda c: bytes(cramjam.lz4.compress_block(c, store_size=True))),
        ("DeflateCompressor", zlib.compress),
        ("SnappyCompressor", lambda c: bytes(cramjam.snappy.compress_raw(c))),
        ("ZstdCompressor", lambda c: bytes(cramjam.zstd.compress(c))),
    ],
)
def test_a_text_across_sstable_chunks_is_found_in_the_decompressed_stream(
    tmp_path: Path, compressor: str, encode: Callable[[bytes], bytes]
) -> None:
    secret = canary()
    payload = FILLER[:100] + secret + FILLER[:300]
    path = sstable(tmp_path / TABLE, payload, 64, compressor, encode)
    info = sstables.read_compression_info(sstables.compression_info_of(path))
    assert (info.compressor, info.chunk_length, info.data_length, info.options) == (compressor, 64, len(payload), {"chunk_length_in_kb": "16"})
    assert b"".join(sstables.chunks(path, info)) == payload
    assert secret not in path.read_bytes()  # it straddles chunks 1 and 2: no chunk holds it whole
    report = scan(tmp_path, [secret])
    assert places(report.findings) == [("cassandra", path.name, 0, "chunk 1, uncompressed offset 100")]
    assert report.scanned["cassandra"] == 2  # Data.db, and CompressionInfo.db searched raw


def test_chunks_that_did_not_shrink_enough_are_stored_uncompressed(tmp_path: Path) -> None:
    secret = canary()
    path = sstable(tmp_path / TABLE, FILLER + secret, 1024, max_compressed_length=100)  # min_compress_ratio in effect
    report = scan(tmp_path, [secret])
    assert places(report.findings) == [("cassandra", path.name, 0, f"chunk {len(FILLER) // 1024}, uncompressed offset {len(FILLER)}")]


def test_an_unknown_compressor_or_a_missing_compression_info_is_unscannable(tmp_path: Path) -> None:
    secret = canary()
    path = sstable(tmp_path / TABLE, secret + FILLER, 256, "QatCompressor", lambda c: c[::-1])
    (tmp_path / TABLE / "oa-7-big-TOC.txt").write_text("Data.db\nCompressionInfo.db\nTOC.txt\n")
    other = sstable(tmp_path / TABLE / "x", FILLER + secret, 256)
    sstables.compression_info_of(other).unlink()
    report = scan(tmp_path, [secret])
    assert [(p.name, why.split(" ")[0]) for p, why in report.unscannable] == [(path.name, "compressor"), (other.name, "compressed")]
    assert "QatCompressor" in report.unscannable[0][1]


def test_an_uncompressed_table_and_the_commit_log_are_searched_as_they_are(tmp_path: Path) -> None:
    secret = canary()
    table = tmp_path / TABLE
    table.mkdir(parents=True)
    (table / "oa-2-big-Data.db").write_bytes(FILLER + secret)
    (table / "oa-2-big-TOC.txt").write_text("Data.db\nTOC.txt\n")
    log = tmp_path / "cassandra" / "data" / "commitlog" / "CommitLog-8-1796177390192.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(struct.pack(">iqH", 8, 1796177390192, 2) + b"{}" + b"\0" * 4 + secret)
    compressed = log.with_name("CommitLog-8-1796177390193.log")
    params = b'{"compressionClass":"LZ4Compressor"}'
    compressed.write_bytes(struct.pack(">iqH", 8, 1796177390193, len(params)) + params)
    report = scan(tmp_path, [secret])
    assert places(report.findings) == [
        ("cassandra", log.name, 0, "offset 20"),
        ("cassandra", "oa-2-big-Data.db", 0, f"offset {len(FILLER)}"),
    ]
    assert [(p.name, why.split(" ")[0]) for p, why in report.unscannable] == [(compressed.name, "commit")]


# --- archives, replay outputs, other files ---------------------------------------------------------


def test_an_archive_segment_is_decoded(tmp_path: Path) -> None:
    secret = canary()
    records = [Raw("chat.events", 0, i, 1_700_000_000_000, b"c", FILLER + (secret if i == 3 else b"")) for i in range(5)]
    path = tmp_path / "archive" / "chat.events" / "2023-11-14" / "p000-000000000000-000000000004.avro"
    path.parent.mkdir(parents=True)
    path.write_bytes(archive.encode_segment("chat.events", records))
    assert secret not in path.read_bytes()
    report = scan(tmp_path, [secret])
    [found] = report.findings
    assert (found.store, found.path, found.needle) == ("archive", path, 0)
    assert found.where.startswith("block 0 at ") and found.where.endswith("of 5 records")


def test_a_replay_file_is_decoded_column_by_column(tmp_path: Path) -> None:
    secret = canary()
    rows = [t.to_record() for t in turns.fold(s.event for s in sample.session(4, 2))]
    rows[1]["prompt"] = [*rows[1]["prompt"], {"role": "user", "content": FILLER.decode() + secret.decode()}]
    path = tmp_path / "replays" / "week.parquet"
    replay.write(rows, path)  # snappy pages: the text is there as a literal, the page's range not searched twice
    lines = tmp_path / "replays" / "week.jsonl"
    replay.write(rows, lines)
    report = scan(tmp_path, [secret])
    assert places(report.findings) == [
        ("replay", "week.jsonl", 0, f"offset {lines.read_bytes().index(secret)}"),
        ("replay", "week.parquet", 0, "row group 0, column prompt"),
    ]
    assert report.scanned["replay"] == 2


def test_documents_are_searched_inside_zip_gzip_and_pdf_streams(tmp_path: Path) -> None:
    secret = canary()
    docs = tmp_path / "documents"
    docs.mkdir()
    with zipfile.ZipFile(docs / "a-docx", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", FILLER + secret)
    (docs / "b-gz").write_bytes(gzip.compress(FILLER + secret))
    pdf = canvas.Canvas(str(docs / "c-pdf"))  # reportlab's default: ASCII85 over Flate
    pdf.drawString(72, 720, f"Quarterly figures {secret.decode()} for the board")
    pdf.save()
    assert all(secret not in p.read_bytes() for p in docs.iterdir())
    report = scan(tmp_path, [secret])
    assert [(f.store, f.path.name, f.where.split(" at ")[0]) for f in report.findings] == [
        ("file", "a-docx", "member word/document.xml, byte 1800"), ("file", "b-gz", "decompressed, byte 1800"), ("file", "c-pdf", "stream"),
    ]
    assert report.unscannable == []


def test_a_container_that_expands_too_far_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containers, "MAX_EXPANDED_BYTES", 4 << 20)
    with zipfile.ZipFile(tmp_path / "bomb", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.xml", b"\0" * (8 << 20))
    report = scan(tmp_path, [b"nothing"])
    assert [(p.name, why) for p, why in report.unscannable] == [("bomb", "zip member a.xml expands past 4 MiB: the rest is not searched")]


def test_what_cannot_be_read_is_reported_never_skipped(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "bad.avro").write_bytes(b"Obj\x01\x02")
    report = scan(tmp_path, [b"nothing"])
    assert sorted((p.name, why.split(" ")[0]) for p, why in report.unscannable) == [
        ("bad.avro", "broken"), ("fifo", "not"), ("link", "a"),
    ]
    assert report.findings == [] and report.scanned == {"kafka": 0, "cassandra": 0, "archive": 1, "replay": 0, "file": 1}


def test_a_directory_deleted_during_the_walk_is_gone_not_unreadable(tmp_path: Path) -> None:
    # Kafka deletes a topic's partition directories, Cassandra a dropped table's, while the scan walks.
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f").write_bytes(b"x")
    walked = []
    for path, why in _files(tmp_path):
        walked.append((path.relative_to(tmp_path).as_posix(), why))
        if path.parent.name == "a":
            (tmp_path / "b" / "f").unlink()
            (tmp_path / "b").rmdir()
    assert walked == [("a/f", None)]
    # The data dir itself missing is no proof of anything: reported.
    assert [why for _, why in _files(tmp_path / "none")] == ["directory unreadable: No such file or directory"]


def test_files_are_told_apart_by_their_names_and_places() -> None:
    def store(path: str) -> str:
        return classify(Path(path))[0]

    assert store("kafka/data/chat.events-3/00000000000000000042.log") == "kafka"
    assert store("kafka/data/chat.events-3.abc-delete/00000000000000000042.log.deleted") == "kafka"
    assert store("kafka/data/chat.events-3/00000000000000000042.index") == "kafka"
    assert store("kafka/logs/server.log") == "kafka"
    assert store("cassandra/data/data/parley/messages-1/da-3gv1_0aa1_2sgk02i0x4kqbvhr7n-bti-Data.db") == "cassandra"
    assert store("cassandra/data/commitlog/CommitLog-8-1.log") == "cassandra"
    assert store("anywhere/p000-000000000000-000000000004.avro") == "archive"
    assert store("out/report.json") == "replay"
    assert store("documents/0f1e") == "file"
