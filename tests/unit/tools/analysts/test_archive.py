"""Archive files (Avro container files keep the records' bytes unchanged), their names, the location,
time parsing of the CLI, and the row digest."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from parley.errors import ConfigError
from schemas import codec
from tools.analysts import archive, digest, sample
from tools.analysts.cli import parse_time
from tools.analysts.location import Location
from tools.analysts.logread import Raw


def _raws(n: int, partition: int = 2, first: int = 40) -> list[Raw]:
    events = [s.event for s in sample.session(2, 3)][:n]
    return [Raw("chat.events", partition, first + i, 1_700_000_000_000 + i, e.key, codec.encode(e)) for i, e in enumerate(events)]


def test_a_segment_round_trips_the_records_bytes(tmp_path: Path) -> None:
    loc = Location(str(tmp_path))
    raws = _raws(10)
    path = archive.segment_path("chat.events", archive.day_of(raws[0].timestamp_ms), 2, raws[0].offset, raws[-1].offset)
    loc.write(path, archive.encode_segment("chat.events", raws))
    (seg,) = archive.segments(loc, "chat.events")[2]
    assert (seg.first, seg.last, seg.day) == (40, 49, "2023-11-14")
    back = list(archive.read_segment(loc, seg))
    assert back == raws
    assert [codec.decode(r.value) for r in back] == [codec.decode(r.value) for r in raws]


def test_segments_are_listed_in_offset_order_and_strangers_ignored(tmp_path: Path) -> None:
    loc = Location(f"file://{tmp_path}")
    for first, last in ((100, 199), (0, 99)):
        loc.write(archive.segment_path("chat.usage", "2024-01-02", 1, first, last), archive.encode_segment("chat.usage", []))
    (tmp_path / "chat.usage" / "2024-01-02" / ".p001-x.tmp").write_bytes(b"")
    (tmp_path / "chat.usage" / "notes.txt").write_text("hi")
    segs = archive.segments(loc, "chat.usage")
    assert [(s.first, s.last) for s in segs[1]] == [(0, 99), (100, 199)]
    assert archive.segments(loc, "chat.events") == {}


def test_an_fsspec_url_works_when_fsspec_is_there(tmp_path: Path) -> None:
    loc = Location("memory://parley-test-" + uuid.uuid4().hex)
    loc.write("chat.events/2024-01-01/p000-000000000000-000000000009.avro", archive.encode_segment("chat.events", _raws(10, 0, 0)))
    (seg,) = archive.segments(loc, "chat.events")[0]
    assert len(list(archive.read_segment(loc, seg))) == 10


def test_a_scheme_whose_package_is_missing_is_named() -> None:
    with pytest.raises(ConfigError, match="nosuchscheme"):
        Location("nosuchscheme://bucket/x")


def test_times_parse_as_iso_epoch_or_age() -> None:
    now = 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z") == now
    assert parse_time("2023-11-14T22:13:20") == now  # UTC unless it says
    assert parse_time(str(now)) == now
    assert parse_time("2h", now) == now - 7_200_000
    assert parse_time(None) is None
    assert datetime.fromtimestamp(parse_time("2023-11-14T23:13:20+01:00") / 1000, timezone.utc).hour == 22  # type: ignore[operator]


def test_the_digest_ignores_row_order_and_sees_one_changed_cell() -> None:
    a = [{"id": uuid.UUID(int=1), "at": datetime(2024, 1, 1), "tags": [uuid.UUID(int=2)], "n": 1}, {"id": uuid.UUID(int=3), "n": None}]
    b = list(reversed(a))
    assert digest.digest("t", a) == digest.digest("t", b)
    c = [{**a[0], "n": 2}, a[1]]
    assert digest.digest("t", a) != digest.digest("t", c)
    assert len(digest.diff(a, c)) == 2
