"""The edge's HTTP/1.1 (edge/http1.py): requests read whole, response heads, and where a response body ends,
whatever the reads' sizes."""

from __future__ import annotations

import pytest

from edge import http1

EVENTS = [b'id: 3:0\r\nevent: delta\r\ndata: {"text": "a"}\r\n\r\n', b"id: 3:1\r\nevent: done\r\ndata: {}\r\n\r\n"]
SSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0])
    + b"%x;ext=1\r\n%s\r\n" % (len(EVENTS[1]), EVENTS[1])
    + b"0\r\n\r\n"
)


def split_head(raw: bytes) -> tuple[http1.Head, bytes]:
    end = raw.index(b"\r\n\r\n") + 4
    return http1.parse_head(raw[:end]), raw[end:]


def test_a_head_parses_with_its_headers_lower_cased_and_repeats_joined() -> None:
    head = http1.parse_head(b"GET /v1/x?a=1 HTTP/1.1\r\nHost: e\r\nLast-Event-ID: 3:7\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
    assert head.start == ("GET", "/v1/x?a=1", "HTTP/1.1")
    assert head.get(b"last-event-id") == b"3:7" and head.get(b"x-a") == b"1, 2"
    with pytest.raises(http1.FramingError):
        http1.parse_head(b"GET\r\n\r\n")
    with pytest.raises(http1.FramingError):
        http1.parse_head(b"GET / HTTP/1.1\r\nno colon\r\n\r\n")


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 10_000])
def test_a_chunked_body_ends_where_it_ends_whatever_the_reads(step: int) -> None:
    head, body = split_head(SSE + b"HTTP/1.1 200 OK\r\n")  # the next response's first bytes follow
    framing = http1.response_body(head, "POST")
    assert isinstance(framing, http1.Chunked)
    taken = 0
    for i in range(0, len(body), step):
        piece = body[i : i + step]
        used = framing.feed(piece)
        taken += used
        if framing.done:
            break
        assert used == len(piece)
    assert framing.done and taken == len(SSE) - len(SSE.split(b"\r\n\r\n", 1)[0]) - 4


def test_trailers_are_part_of_the_body() -> None:
    framing = http1.Chunked()
    data = b"1\r\nx\r\n0\r\nX-T: 1\r\n\r\nNEXT"
    assert framing.feed(data) == len(data) - 4 and framing.done


def test_a_bad_chunk_size_is_a_framing_error() -> None:
    with pytest.raises(http1.FramingError):
        http1.Chunked().feed(b"zz\r\n")


def test_bodies_by_status_method_and_headers() -> None:
    def body(raw: bytes, method: str = "GET") -> http1.Body:
        return http1.response_body(http1.parse_head(raw), method)

    assert isinstance(body(b"HTTP/1.1 204 No Content\r\n\r\n"), http1.Empty)
    assert isinstance(body(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", "HEAD"), http1.Empty)
    assert isinstance(body(b"HTTP/1.1 200 OK\r\n\r\n"), http1.UntilClose)
    length = body(b"HTTP/1.1 421 Misdirected Request\r\ncontent-length: 5\r\n\r\n")
    assert isinstance(length, http1.Length) and length.feed(b"abcdefg") == 5 and length.done
    with pytest.raises(http1.FramingError):
        body(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n")


def test_connection_close_and_http_1_0() -> None:
    assert http1.parse_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").wants_close()
    assert not http1.parse_head(b"GET / HTTP/1.1\r\n\r\n").wants_close()
    assert http1.parse_head(b"GET / HTTP/1.0\r\n\r\n").wants_close()
    assert not http1.parse_head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").wants_close()
    assert http1.parse_head(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n").wants_close()


def test_rebuild_drops_and_adds_header_lines_and_keeps_the_rest_as_sent() -> None:
    head = http1.parse_head(b"POST /v1/x HTTP/1.1\r\nHost: e\r\nConnection: close\r\nX-Parley-Route: x\r\nAuthorization: Bearer k\r\n\r\n")
    out = http1.rebuild(head, http1.HOP_BY_HOP | {b"x-parley-route"}, (b"X-Parley-Route: reroute",))
    assert out == b"POST /v1/x HTTP/1.1\r\nHost: e\r\nAuthorization: Bearer k\r\nX-Parley-Route: reroute\r\n\r\n"


# ------------------------------------------------------------------ requests

PIPELINED = (
    b"POST /v1/a HTTP/1.1\r\nHost: e\r\nContent-Length: 5\r\n\r\nhello"
    + b"POST /v1/b HTTP/1.1\r\nHost: e\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n"
    + b"GET /v1/c HTTP/1.0\r\nHost: e\r\n\r\n"
)


def read(data: bytes, step: int, max_head: int = 4096, max_body: int = 4096) -> list[http1.Request]:
    reader = http1.RequestReader(max_head, max_body)
    for i in range(0, len(data), step):
        reader.feed(data[i : i + step])
    return list(reader.requests)


@pytest.mark.parametrize("step", [1, 2, 7, 64, 10_000])
def test_pipelined_requests_are_read_whole_and_in_order_whatever_the_reads(step: int) -> None:
    a, b, c = read(PIPELINED, step)
    assert a.head.start == ("POST", "/v1/a", "HTTP/1.1") and a.body == b"hello" and a.head.get(b"host") == b"e"
    assert not a.head.wants_close() and c.head.wants_close()  # HTTP/1.0 without keep-alive
    assert (c.head.start, c.body) == (("GET", "/v1/c", "HTTP/1.0"), b"")


def test_a_chunked_body_is_held_whole_and_goes_on_with_a_length() -> None:
    _, b, _ = read(PIPELINED, 10_000)
    assert b.body == b"abcde"
    assert http1.rebuild(b.head, http1.HOP_BY_HOP) == b"POST /v1/b HTTP/1.1\r\nHost: e\r\ncontent-length: 5\r\n\r\n"
    assert b.head.get(b"x-t") is None  # the trailer is dropped


def test_a_head_waits_for_its_body_and_an_upgrade_is_not_taken_up() -> None:
    reader = http1.RequestReader(4096, 4096)
    reader.feed(b"POST /v1/x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert reader.waiting is not None and reader.waiting.get(b"expect") == b"100-continue" and not reader.requests
    reader.feed(b"hi" + b"GET /u HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nGET /next HTTP/1.1\r\n\r\n")
    assert reader.waiting is None
    assert [(r.head.start[1], r.body) for r in reader.requests] == [("/v1/x", b"hi"), ("/u", b""), ("/next", b"")]


@pytest.mark.parametrize(
    "raw",
    [
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_what_does_not_parse_is_a_framing_error(raw: bytes) -> None:
    with pytest.raises(http1.FramingError):
        read(raw, 10_000)


@pytest.mark.parametrize("step", [1, 100, 10_000])
def test_heads_and_bodies_over_the_limits(step: int) -> None:
    with pytest.raises(http1.HeadTooLarge):
        read(b"GET / HTTP/1.1\r\n" + (b"X-A: " + b"a" * 100 + b"\r\n") * 20 + b"\r\n", step, max_head=1024)
    with pytest.raises(http1.HeadTooLarge):  # a head that never ends, one long line
        read(b"GET / HTTP/1.1\r\nX-A: " + b"a" * 3000, step, max_head=1024)
    with pytest.raises(http1.BodyTooLarge):
        read(b"POST / HTTP/1.1\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000, step, max_body=1024)
    with pytest.raises(http1.BodyTooLarge):
        read(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"100\r\n" + b"x" * 256 + b"\r\n") * 5, step, max_body=1024)
    assert len(read(b"POST / HTTP/1.1\r\nContent-Length: 1024\r\n\r\n" + b"x" * 1024, step, max_body=1024)) == 1
