"""Trace ids: the caller's X-Request-ID is kept for finding its requests, never as the whole trace id (L4)."""

from __future__ import annotations

from gateway.tracing import trace_for


def test_a_callers_id_follows_a_fresh_part_so_two_callers_never_share_a_trace() -> None:
    a, b = trace_for("req-1"), trace_for("req-1")
    assert a != b and a.endswith("-req-1") and b.endswith("-req-1")
    assert len(a.split("-", 1)[0]) == 16


def test_an_insane_or_missing_id_gets_a_fresh_one() -> None:
    for header in (None, "", "has space", "x" * 65, "new\nline"):
        trace = trace_for(header)
        assert len(trace) == 32 and trace.isalnum()
