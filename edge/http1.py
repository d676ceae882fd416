"""Just enough HTTP/1.1 to pass messages through: requests parsed, responses' framing counted.

A request is parsed by httptools (llhttp), the parser the gateway's uvicorn
uses too: ``RequestReader`` turns a connection's bytes into whole requests
(head and body: the edge holds the body, to send it again on failover).

A response is never decoded: the edge forwards its bytes as they arrive and
only counts them against the message's framing (RFC 9112 §6: ``Content-Length``,
``chunked``, or until the connection closes), so it knows when a response is
over and the connection can carry the next request. That needs to know where
a body ends inside a read, which httptools does not report; hence ``parse_head``
and the ``Body`` counters. A server-sent-events reply is a chunked body like any
other; its events go through unparsed.

Pure: bytes in, facts out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import httptools

#: Headers that describe one connection, not the message (RFC 9110 §7.6.1): never forwarded as they came.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection"})


class FramingError(ValueError):
    """A head or a body that does not parse: the connection cannot be trusted past it."""


class HeadTooLarge(FramingError):
    """A request head (or its trailers) over the reader's ``max_head``."""


class BodyTooLarge(FramingError):
    """A request body over the reader's ``max_body``."""


@dataclass(frozen=True)
class Head:
    """A request or status line and its header lines."""

    start: tuple[str, str, str]  # request: method, target, version; response: version, status, reason
    lines: tuple[bytes, ...]  # the header lines in their order and spelling, as ``name: value`` (no CRLF)
    headers: dict[bytes, bytes]  # lower-cased name → value (a repeated header: the values joined by ", ")

    def get(self, name: bytes) -> bytes | None:
        return self.headers.get(name)

    def wants_close(self) -> bool:
        """The sender ends the connection after this message (``Connection: close``, or HTTP/1.0 without keep-alive)."""
        tokens = {t.strip().lower() for t in (self.get(b"connection") or b"").split(b",")}
        if self.start[0].startswith("HTTP/"):  # a response: version first
            version = self.start[0]
        else:
            version = self.start[2]
        return b"close" in tokens or (version == "HTTP/1.0" and b"keep-alive" not in tokens)


def parse_head(raw: bytes) -> Head:
    """A head up to and including its blank line (a response's: requests come from ``RequestReader``)."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes any byte
        raise FramingError(str(exc)) from exc
    first = text.split("\r\n", 1)[0]
    parts = first.split(" ", 2)
    if len(parts) < 2:
        raise FramingError(f"not an HTTP start line: {first[:80]!r}")
    fields: list[tuple[bytes, bytes]] = []
    for line in raw[len(first) + 2 :].split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise FramingError(f"not a header line: {line[:80]!r}")
        fields.append((name, value.strip()))
    return _head((parts[0], parts[1], parts[2] if len(parts) > 2 else ""), fields)


def _head(start: tuple[str, str, str], fields: list[tuple[bytes, bytes]]) -> Head:
    headers: dict[bytes, bytes] = {}
    for name, value in fields:
        key = name.lower()
        headers[key] = headers[key] + b", " + value if key in headers else value
    return Head(start, tuple(name + b": " + value for name, value in fields), headers)


# ------------------------------------------------------------------ requests


@dataclass(frozen=True)
class Request:
    head: Head  # framed by Content-Length whatever framing the body came with (it is held whole)
    body: bytes


class RequestReader:
    """A connection's requests, in order, from its bytes as they arrive (httptools' ``HttpRequestParser``).

    ``feed`` adds each request its bytes complete to ``requests``; ``waiting`` is the head of a request
    whose body is still to come (for ``Expect: 100-continue``). A chunked body is held de-chunked, so
    its head goes on with a ``Content-Length`` instead (and without trailers: RFC 9110 §6.5.1 lets a
    recipient that removes the chunking discard them). An ``Upgrade`` is not taken up (the edge never
    answers 101; RFC 9110 §7.8): the connection goes on as HTTP/1.1. Once ``feed`` has raised, the
    connection cannot be trusted: feed it nothing more.
    """

    def __init__(self, max_head: int, max_body: int) -> None:
        self.max_head, self.max_body = max_head, max_body
        self.requests: deque[Request] = deque()
        self.waiting: Head | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._stage = "between"  # then "head", "body", and "between" again once the request is complete
        self._completed = 0  # requests completed so far
        self._head_size = 0  # what the callbacks saw of the head (or the trailers) in progress
        self._head_fed = 0  # bytes of the reads that were all the head in progress's, none complete
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._body = bytearray()
        self._refused: FramingError | None = None

    def feed(self, data: bytes) -> None:
        """Parse ``data``; raises ``FramingError`` (``HeadTooLarge``, ``BodyTooLarge``) where it cannot go on."""
        began, completed = self._stage, self._completed
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:  # the request is complete; what follows is the next one
            self.feed(data[upgrade.args[0] :])
            return
        except httptools.HttpParserError as exc:
            raise self._refused or FramingError(str(exc) or type(exc).__name__) from None
        # Every byte of a read that began outside a body and ends inside a head, completing nothing, is that
        # head's: counted, so a head that never ends is refused (a head begun after a body's end, in the same
        # read, is counted from the next read on).
        if self._stage == "head" and began != "body" and self._completed == completed:
            self._head_fed += len(data)
            if self._head_fed > self.max_head:
                raise HeadTooLarge(f"a request head over {self.max_head} bytes")

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self._stage, self._head_size, self._head_fed = "head", 0, 0
        self._url, self._fields, self._body = b"", [], bytearray()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._grow_head(len(name) + len(value) + 4)
        if self._stage == "head":  # else a trailer: dropped
            self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        method = self._parser.get_method().decode("latin-1")
        version = "HTTP/" + self._parser.get_http_version()
        self.waiting = _head((method, self._url.decode("latin-1"), version), self._fields)
        self._stage, self._head_size = "body", 0

    def on_body(self, body: bytes) -> None:
        self._body += body
        if len(self._body) > self.max_body:
            self._refuse(BodyTooLarge(f"a request body over {self.max_body} bytes"))

    def on_message_complete(self) -> None:
        head, self.waiting = self.waiting, None
        self._stage, self._completed = "between", self._completed + 1
        assert head is not None
        if head.get(b"transfer-encoding") is not None:
            fields = [(n, v) for n, v in self._fields if n.lower() not in (b"transfer-encoding", b"content-length")]
            head = _head(head.start, [*fields, (b"content-length", b"%d" % len(self._body))])
        self.requests.append(Request(head, bytes(self._body)))

    def _grow_head(self, n: int) -> None:
        self._head_size += n
        if self._head_size > self.max_head:
            self._refuse(HeadTooLarge(f"a request head over {self.max_head} bytes"))

    def _refuse(self, error: FramingError) -> None:
        """Raise ``error`` out of a callback; httptools wraps it, so ``feed`` raises it again as it was."""
        self._refused = error
        raise error


# ------------------------------------------------------------------ bodies


class Body:
    """Where a body ends: ``feed`` takes bytes and says how many of them are this body's."""

    done = False

    def feed(self, data: bytes) -> int:
        raise NotImplementedError


class Empty(Body):
    done = True

    def feed(self, data: bytes) -> int:
        return 0


class Length(Body):
    def __init__(self, length: int) -> None:
        self.left = length
        self.done = length == 0

    def feed(self, data: bytes) -> int:
        take = min(self.left, len(data))
        self.left -= take
        self.done = self.left == 0
        return take


class UntilClose(Body):
    """A response without a length: it ends when the server closes the connection."""

    def feed(self, data: bytes) -> int:
        return len(data)


_SIZE, _DATA, _TRAILER = range(3)
#: Longest chunk-size or trailer line accepted.
MAX_LINE = 4096


class Chunked(Body):
    """``Transfer-Encoding: chunked``: chunk-size lines, data, a zero chunk, trailers, a blank line."""

    def __init__(self) -> None:
        self._state = _SIZE
        self._line = b""
        self._left = 0  # bytes of the current chunk still to come, its CRLF included

    def feed(self, data: bytes) -> int:
        i, n = 0, len(data)
        while i < n and not self.done:
            if self._state == _DATA:
                take = min(self._left, n - i)
                i += take
                self._left -= take
                if self._left == 0:
                    self._state = _SIZE
                continue
            j = data.find(b"\n", i)
            if j < 0:
                self._line += data[i:]
                if len(self._line) > MAX_LINE:
                    raise FramingError("a chunk-size or trailer line longer than 4 KiB")
                return n
            line = (self._line + data[i:j]).rstrip(b"\r")
            self._line = b""
            i = j + 1
            if self._state == _TRAILER:
                self.done = line == b""
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise FramingError(f"not a chunk size: {line[:40]!r}") from None
            if size < 0:
                raise FramingError("a negative chunk size")
            if size == 0:
                self._state = _TRAILER
            else:
                self._state, self._left = _DATA, size + 2
        return i


def response_body(head: Head, method: str) -> Body:
    """How a response to ``method`` is framed."""
    status = int(head.start[1])
    if method == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return Empty()
    if _chunked(head):
        return Chunked()
    if head.get(b"content-length") is not None:
        return Length(_length(head))
    return UntilClose()


def status_of(head: Head) -> int:
    try:
        return int(head.start[1])
    except ValueError:
        raise FramingError(f"not a status code: {head.start[1][:10]!r}") from None


def _chunked(head: Head) -> bool:
    coding = head.get(b"transfer-encoding")
    if coding is None:
        return False
    if coding.rsplit(b",", 1)[-1].strip().lower() != b"chunked":
        raise FramingError("a transfer coding that does not end in chunked")
    return True


def _length(head: Head) -> int:
    raw = head.get(b"content-length") or b""
    values = {v.strip() for v in raw.split(b",")}
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise FramingError(f"not one Content-Length: {raw[:40]!r}")
    return int(next(iter(values)))


def rebuild(head: Head, drop: frozenset[bytes], add: tuple[bytes, ...] = ()) -> bytes:
    """The head again, without the headers named in ``drop`` and with the lines ``add`` appended."""
    kept = [line for line in head.lines if line.partition(b":")[0].lower() not in drop]
    start = " ".join(part for part in head.start if part).encode("latin-1")
    return b"\r\n".join([start, *kept, *add]) + b"\r\n\r\n"
