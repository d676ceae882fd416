"""bench.chaos_probe's verdict on a gateway's answer to a read during an outage."""

from __future__ import annotations

import httpx

from bench.chaos_probe import BAD, outcome


def _answer(status: int, **kw: object) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", "http://gw/v1/conversations"), **kw)  # type: ignore[arg-type]


def test_a_clean_refusal_is_fine_and_anything_else_is_not() -> None:
    assert outcome(_answer(200, json={"conversations": []})) == "2xx"
    assert outcome(_answer(503, json={"error": {"code": "unavailable"}})) == "503 JSON"
    assert outcome(_answer(503, text="Service Unavailable")) in BAD
    assert outcome(_answer(503, json=["unavailable"])) in BAD
    assert outcome(_answer(500, json={"error": {"code": "internal"}})) in BAD
