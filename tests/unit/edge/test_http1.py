"""The edge's HTTP/1.1 framing (edge/http1.py): heads, and where a body ends, whatever the reads' sizes."""

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
    assert isinstance(http1.request_body(http1.parse_head(b"GET / HTTP/1.1\r\n\r\n")), http1.Empty)


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
