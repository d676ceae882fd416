"""The proof behind ``parley audit erasure``: search every file under the data dir for strings that must be gone.

Each file is read the way its store wrote it, because most of what is stored is compressed and a byte
search of the file alone would find nothing and prove nothing:

- ``kafka``: log segments (``<20-digit base offset>.log``, also ``.deleted``/``.cleaned``/``.swap``
  ones not yet removed): every record batch decompressed (``tools.ondisk.kafka_segments``); the
  bytes outside batches (a torn tail) searched as they are.
- ``cassandra``: SSTable ``*-Data.db`` decompressed chunk by chunk as one stream
  (``tools.ondisk.sstables``); commit log segments, hints, indexes and the rest as they are. Flush
  the memtables first (``infra.local.nodetool.flush``) so rows only in memory reach an SSTable.
- ``archive``: Avro container files (``*.avro``, what ``parley archive`` writes), every block decoded.
- ``replay``: ``parley replay`` outputs: Parquet decoded column by column, JSON lines (and the
  ``report.md``/``report.json`` of ``parley report``) as they are.
- ``file``: everything else as it is, and inside it too where it is a zip (a .docx), gzip or PDF
  (``tools.ondisk.containers``).

Every file is also searched as it is on disk, where the decoded views do not cover it. What cannot
be decoded (an unknown codec, a broken block, an unreadable file) is reported as unscannable, never
skipped in silence: a clean scan with unscannable files proves nothing about them.
"""

from __future__ import annotations

import bisect
import errno
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tools.ondisk import avro_blocks, containers, kafka_segments, sstables
from tools.ondisk.search import Needles

STORES = ("kafka", "cassandra", "archive", "replay", "file")
KAFKA_SEGMENT = re.compile(r"^\d{20}\.log(\.deleted|\.cleaned|\.swap)?$")
COMMIT_LOG = re.compile(r"^CommitLog-\d+-\d+\.log$")
REPORT_FILES = ("report.md", "report.json")


#: Why a file deleted between the listing and its read (a rolled segment, a compacted SSTable) was not read.
VANISHED = "vanished during the scan (deleted or compacted): scan again"


@dataclass(frozen=True)
class Finding:
    store: str  # "kafka" | "cassandra" | "archive" | "replay" | "file"
    path: Path  # the file
    needle: int  # index into the needles passed in
    where: str  # human-readable location: "offset 1234", "value of record 17 of lz4 batch at 4096", "chunk 3"


@dataclass(frozen=True)
class ScanReport:
    findings: list[Finding]
    scanned: dict[str, int]  # store → files scanned
    unscannable: list[tuple[Path, str]]  # file, why (e.g. "snappy batch: no codec installed")


class _Scan:
    """One file's search: what it found, and what it could not decode."""

    def __init__(self, store: str, path: Path, needles: Needles) -> None:
        self.store, self.path, self.needles = store, path, needles
        self.findings: list[Finding] = []
        self.unscannable: list[str] = []

    def found(self, needle: int, where: str) -> None:
        self.findings.append(Finding(self.store, self.path, needle, where))

    def search(self, data: bytes, where: Callable[[int], str]) -> None:
        for needle, at in self.needles.find(data):
            self.found(needle, where(at))

    def search_stream(self, chunks: Iterator[bytes], where: Callable[[int], str]) -> None:
        for needle, at in self.needles.stream(chunks):
            self.found(needle, where(at))

    def raw(self, covered: Sequence[tuple[int, int]] = ()) -> None:
        """The file as it is on disk, but for hits wholly inside ``covered`` (start, end) ranges, sorted
        and apart: the parts a decoded view already searched."""
        starts = [s for s, _ in covered]
        for needle, at in _raw_hits(self.path, self.needles):
            i = bisect.bisect_right(starts, at) - 1
            if i >= 0 and at + len(self.needles.needles[needle]) <= covered[i][1]:
                continue
            self.found(needle, f"offset {at}")


def scan(data_dir: Path, needles: Sequence[bytes]) -> ScanReport:
    """Every occurrence of each needle in every file under ``data_dir``, its store's formats decoded."""
    search = Needles(needles)
    findings: list[Finding] = []
    scanned = dict.fromkeys(STORES, 0)
    unscannable: list[tuple[Path, str]] = []
    for path, problem in _files(data_dir):
        if problem:
            unscannable.append((path, problem))
            continue
        store, reader = classify(path.relative_to(data_dir))
        one = _Scan(store, path, search)
        try:
            reader(one)
            scanned[store] += 1
        except FileNotFoundError:
            one.unscannable.append(VANISHED)
        except OSError as exc:
            one.unscannable.append(f"unreadable: {exc.strerror or exc}")
        findings += one.findings  # what was found before a failure was found all the same
        unscannable += [(path, why) for why in one.unscannable]
    return ScanReport(findings, scanned, unscannable)


Reader = Callable[[_Scan], None]


def classify(relative: Path) -> tuple[str, Reader]:
    """(store, reader) for a file, from its name and where it lies under the data dir."""
    name = relative.name
    if KAFKA_SEGMENT.match(name):
        return "kafka", _kafka_segment
    if name.endswith("-Data.db"):
        return "cassandra", _sstable
    if COMMIT_LOG.match(name):
        return "cassandra", _commit_log
    if name.endswith(".avro"):
        return "archive", _archive
    if name.endswith(".parquet"):
        return "replay", _parquet
    if name.endswith(".jsonl") or name in REPORT_FILES:
        return "replay", _plain
    parts = relative.parts[:-1]
    store = "kafka" if "kafka" in parts else "cassandra" if "cassandra" in parts else "file"
    return store, _plain


def _kafka_segment(one: _Scan) -> None:
    covered: list[tuple[int, int]] = []
    with one.path.open("rb") as f:
        for batch in kafka_segments.batches(f):
            try:
                records = kafka_segments.decompress(batch)
            except kafka_segments.CorruptBatch as exc:
                one.unscannable.append(f"batch at {batch.position} (offset {batch.base_offset}): {exc}")
                continue
            covered.append((batch.position, batch.position + kafka_segments.HEADER.size + len(batch.body)))
            hits = list(one.needles.find(records))
            if not hits:
                continue
            try:
                parts = kafka_segments.fields(records)
            except kafka_segments.CorruptBatch:
                parts = []  # found all the same; only its place is vaguer
            for needle, at in hits:
                one.found(
                    needle,
                    f"{kafka_segments.locate(parts, at)} of {batch.codec} batch at {batch.position} "
                    f"(offset {batch.base_offset})",
                )
    one.raw(covered)


def _sstable(one: _Scan) -> None:
    info_path = sstables.compression_info_of(one.path)
    if not info_path.exists():
        toc = one.path.with_name(one.path.name.removesuffix("Data.db") + "TOC.txt")
        if not toc.exists() or "CompressionInfo.db" in toc.read_text(errors="replace"):
            one.unscannable.append("compressed SSTable without its CompressionInfo.db (still being written?)")
        one.raw()  # plain bytes where its table has compression off; all there is to search otherwise
        return
    try:
        info = sstables.read_compression_info(info_path, sstables.has_max_compressed_length(one.path))
        one.search_stream(
            sstables.chunks(one.path, info),
            lambda at: f"chunk {at // info.chunk_length}, uncompressed offset {at}",
        )
    except sstables.Unreadable as exc:
        one.unscannable.append(str(exc))
        one.raw()


def _commit_log(one: _Scan) -> None:
    """Commit log segments are plain unless ``commitlog_compression`` or encryption is configured;
    their header says which (version int32, id int64, parameters: uint16 length + JSON)."""
    with one.path.open("rb") as f:
        head = f.read(14)
        params = f.read(int.from_bytes(head[12:14], "big")) if len(head) == 14 else b""
    if params.strip() not in (b"", b"{}"):
        one.unscannable.append(f"commit log segment with parameters {params[:200]!r}: compressed or encrypted, not decoded")
    one.raw()


def _archive(one: _Scan) -> None:
    decoded: tuple[int, int] | None = None  # from the first decoded block's start to the last one's end
    with one.path.open("rb") as f:
        try:
            for block in avro_blocks.blocks(f):
                one.search(block.data, lambda at, b=block: f"block {b.index} at {b.position}, byte {at} of {b.objects} records")
                decoded = (decoded[0] if decoded else block.position, block.end)
        except avro_blocks.Unreadable as exc:
            one.unscannable.append(str(exc))
    one.raw([decoded] if decoded else [])


def _parquet(one: _Scan) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    covered: list[tuple[int, int]] = []
    try:
        parquet = pq.ParquetFile(one.path)
        for group in range(parquet.num_row_groups):
            table = parquet.read_row_group(group)
            meta = parquet.metadata.row_group(group)
            for column, name in enumerate(table.column_names):
                for chunk in table.column(column).chunks:
                    # Every buffer of the column, its children's included: the values' bytes are in them.
                    for buf in chunk.buffers():
                        if buf is not None:
                            one.search(buf.to_pybytes(), lambda at, g=group, n=name: f"row group {g}, column {n}")
            for column in range(meta.num_columns):
                c = meta.column(column)
                start = min(o for o in (c.dictionary_page_offset, c.data_page_offset) if o is not None)
                covered.append((start, start + c.total_compressed_size))
    except pa.ArrowInvalid as exc:
        one.unscannable.append(f"Parquet: {exc}")
    one.raw(sorted(covered))


def _plain(one: _Scan) -> None:
    with one.path.open("rb") as f:
        what = containers.kind(f.read(8))
    if what is not None:
        try:
            for where, chunks in containers.parts(one.path, what):
                one.search_stream(chunks, lambda at, w=where: f"{w}, byte {at}")
        except containers.Unreadable as exc:
            one.unscannable.append(str(exc))
    one.raw()


def _files(root: Path) -> Iterator[tuple[Path, str | None]]:
    """Every file under ``root`` in name order, with why it cannot be searched (None: it can)."""
    problems: list[tuple[Path, str]] = []

    def unreadable_dir(exc: OSError) -> None:
        if isinstance(exc, FileNotFoundError) and Path(exc.filename) != root:
            return  # deleted after its parent was listed (a Kafka topic deleted, a Cassandra table dropped)
        problems.append((Path(exc.filename), f"directory unreadable: {exc.strerror}"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue  # gone between the listing and now: nothing of it is on disk any more
            if stat.S_ISLNK(mode):
                yield path, "a symbolic link: not followed (scan its target's directory)"
            elif not stat.S_ISREG(mode):
                yield path, "not a regular file"
            else:
                yield path, None
        for dirname in dirnames:
            if (Path(dirpath) / dirname).is_symlink():
                yield Path(dirpath) / dirname, "a symbolic link to a directory: not followed"
    yield from problems


def _raw_hits(path: Path, needles: Needles) -> Iterator[tuple[int, int]]:
    """(needle, offset) in the file's bytes, skipping the holes of a sparse file (Kafka preallocates
    its 10 MiB offset and time indexes sparse: read whole, they would be most of the bytes read)."""
    with path.open("rb") as f:
        for start, end in _data_regions(f.fileno()):
            f.seek(start)
            for needle, at in needles.stream(_read(f, end - start)):
                yield needle, start + at


def _data_regions(fd: int) -> Iterator[tuple[int, int]]:
    size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole after pos
                return
            yield pos, size  # no SEEK_DATA here: all of it is data
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end
        pos = end


def _read(f: BinaryIO, n: int, size: int = 1 << 20) -> Iterator[bytes]:
    """The next ``n`` bytes of ``f`` (fewer if it ends), ``size`` at a time."""
    while n > 0 and (chunk := f.read(min(size, n))):
        n -= len(chunk)
        yield chunk
