"""Just enough HTTP/1.1 to pass messages through: where a head ends, what it says, where a body ends.

The edge never decodes a body: it forwards the bytes as they arrive and only
counts them against the message's framing (RFC 9112 §6: ``Content-Length``,
``chunked``, or until the connection closes), so it knows when a response is
over and the connection can carry the next request. A server-sent-events reply
is a chunked body like any other; its events go through unparsed.

Pure: bytes in, facts out.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Headers that describe one connection, not the message (RFC 9110 §7.6.1): never forwarded as they came.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection"})


class FramingError(ValueError):
    """A head or a chunked body that does not parse: the connection cannot be trusted past it."""


@dataclass(frozen=True)
class Head:
    """A request or status line and its header lines, as they came."""

    start: tuple[str, str, str]  # request: method, target, version; response: version, status, reason
    lines: tuple[bytes, ...]  # raw header lines, without their CRLF
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
    """A head up to and including its blank line."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes any byte
        raise FramingError(str(exc)) from exc
    first = text.split("\r\n", 1)[0]
    parts = first.split(" ", 2)
    if len(parts) < 2:
        raise FramingError(f"not an HTTP start line: {first[:80]!r}")
    start = (parts[0], parts[1], parts[2] if len(parts) > 2 else "")
    lines: list[bytes] = []
    headers: dict[bytes, bytes] = {}
    for line in raw[len(first) + 2 :].split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise FramingError(f"not a header line: {line[:80]!r}")
        key, value = name.lower(), value.strip()
        headers[key] = headers[key] + b", " + value if key in headers else value
        lines.append(line)
    return Head(start, tuple(lines), headers)


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


def request_body(head: Head) -> Body:
    """How a request's body is framed (a request without a length has none)."""
    if _chunked(head):
        return Chunked()
    return Length(_length(head)) if head.get(b"content-length") is not None else Empty()


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
