"""The edge: HTTP/1.1 in, the same bytes out to the gateway that owns the conversation.

A connection from a client is a ``Client`` protocol: it reads one request's
head and body (held, up to PARLEY_EDGE_MAX_BODY, so it can be sent again),
asks ``edge.routes`` where it goes, and lends the response to an ``Exchange``
on a kept-alive connection to that gateway (``Upstream``). The response's bytes
go to the client as they arrive, in the callback that received them: nothing is
parsed past the head, no stream is held back (only the framing is counted,
``edge.http1``, to know when the connection may carry the next request).
Back-pressure passes through: a client that reads slowly pauses the reading of
its gateway's connection; a client that leaves closes it, so the gateway sees
the disconnect as it would directly.

Failover: a gateway whose connection is refused (or the health checks see
unready) is skipped for the next in ring order; a kept-alive connection the
gateway had closed is retried once on a new one; a gateway that answers 421
(gateway/ownership.py) gets the request sent on to the partition it names.
Anything that goes wrong after a response has begun closes the client's
connection: an SSE client then resumes with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from dataclasses import dataclass

from edge import http1
from edge.routes import order, route
from edge.settings import EdgeSettings
from parley.metrics import EDGE_ROUTES, EDGE_UPSTREAM_ERRORS
from parley.shards import owner
from schemas.catalog import TOPICS

log = logging.getLogger(__name__)

#: The request header that lets a gateway answer 421, and the response header naming the owner's partition
#: (gateway/ownership.py).
ROUTE_HEADER = b"x-parley-route"
PARTITION_HEADER = b"x-parley-partition"
#: Request headers never forwarded as they came: hop-by-hop ones, the edge's own, and Expect (the edge answers it).
DROPPED = http1.HOP_BY_HOP | {ROUTE_HEADER, b"expect"}
#: Idle kept-alive connections held per gateway.
MAX_IDLE = 256


class Outcome:
    DONE = "done"  # the response went through whole
    REROUTE = "reroute"  # a 421 naming another partition, swallowed
    ENDED_EARLY = "ended early"  # the gateway closed before a byte of response: nothing reached the client
    CUT = "cut"  # ended after the response began, or the client left: the client's connection is closed


# ------------------------------------------------------------------ a gateway's side


class Upstream(asyncio.Protocol):
    """One connection to a gateway, carrying one exchange at a time."""

    def __init__(self, gateway: int) -> None:
        self.gateway = gateway
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.exchange is None:  # nothing is due on an idle connection: it cannot be trusted with the next request
            self.close()
            return
        self.exchange.from_upstream(data)

    def eof_received(self) -> bool:
        if self.exchange is not None:
            self.exchange.upstream_ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.exchange is not None:
            self.exchange.upstream_ended()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Exchange:
    """One response, from a gateway's connection to a client's."""

    def __init__(self, client: Client, upstream: Upstream, method: str, reroute: bool, max_head: int) -> None:
        self.client = client
        self.upstream = upstream
        self.method = method
        self.reroute = reroute
        self.max_head = max_head
        self.head = bytearray()
        self.body: http1.Body | None = None
        self.started = False  # the response head was written to the client
        self.swallow = False  # a 421 being read to its end, for the request to go elsewhere
        self.partition: int | None = None  # the partition a 421 named
        self.reusable = True
        self.close_after = False
        self.result: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def from_upstream(self, data: bytes) -> None:
        if self.result.done():
            self.reusable = False
            return
        try:
            if self.body is None:
                data = self._head(data)
                if self.body is None:
                    return
            used = self.body.feed(data) if data else 0
        except (http1.FramingError, ValueError) as exc:
            log.warning("a gateway's response does not parse; connection closed", extra={"gateway": self.upstream.gateway, "error": str(exc)})
            self.reusable = False
            self._end(Outcome.CUT if self.started else Outcome.ENDED_EARLY)
            return
        if used and not self.swallow:
            self.client.write(data if used == len(data) else data[:used])
        if used < len(data):
            self.reusable = False  # bytes past the end of the response
        if self.body.done:
            self._end(Outcome.REROUTE if self.swallow else Outcome.DONE)

    def _head(self, data: bytes) -> bytes:
        """Take the response head from ``data``; what follows it."""
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > self.max_head:
                raise http1.FramingError("a response head over PARLEY_EDGE_MAX_HEAD")
            return b""
        raw, rest = bytes(self.head[: end + 4]), bytes(self.head[end + 4 :])
        self.head.clear()
        head = http1.parse_head(raw)
        status = http1.status_of(head)
        if 100 <= status < 200:
            if status == 101:
                raise http1.FramingError("protocol upgrades are not passed through")
            self.client.write(raw)  # an interim response (103 Early Hints): the final head follows
            return self._head(rest) if rest else b""
        self.body = http1.response_body(head, self.method)
        self.close_after = head.wants_close() or isinstance(self.body, http1.UntilClose)
        named = head.get(PARTITION_HEADER)
        if status == 421 and self.reroute and named is not None:
            self.swallow, self.partition = True, int(named)
        else:
            self.client.write(raw)
            self.started = True
        return rest

    def upstream_ended(self) -> None:
        if self.result.done():
            return
        self.reusable = False
        if isinstance(self.body, http1.UntilClose):
            self._end(Outcome.DONE)
        else:
            self._end(Outcome.CUT if self.started else Outcome.ENDED_EARLY)

    def client_left(self) -> None:
        self.reusable = False
        if self.upstream.transport is not None:
            self.upstream.transport.abort()  # the gateway sees its client leave, as it would without the edge
        self._end(Outcome.CUT)

    def _end(self, outcome: str) -> None:
        if not self.result.done():
            self.result.set_result(outcome)


# ------------------------------------------------------------------ a client's side


class Client(asyncio.Protocol):
    """One client connection: requests read one at a time, each served before the next is read."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.reader = http1.RequestReader(edge.settings.max_head_bytes, edge.settings.max_body_bytes)
        self.continued: http1.Head | None = None  # the head last answered 100 Continue
        self.refusal: tuple[int, str] | None = None  # what does not parse: answered once the requests before it are
        self.busy = False  # a request is being served: what arrives meanwhile waits in buf
        self.exchange: Exchange | None = None
        self.gone = False
        self._idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.edge.clients.add(self)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy:
            if len(self.buf) > self.edge.settings.max_head_bytes and self.transport is not None:
                self.transport.pause_reading()  # a client sending ahead of its responses waits
            return
        self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.edge.clients.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        if self.exchange is not None:
            self.exchange.client_left()

    def pause_writing(self) -> None:  # the client reads slower than its gateway writes
        if self.exchange is not None and self.exchange.upstream.transport is not None:
            self.exchange.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.exchange is not None and self.exchange.upstream.transport is not None:
            self.exchange.upstream.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if not self.gone and self.transport is not None:
            self.transport.write(data)

    def served(self, keep_alive: bool) -> None:
        """The request's response is over: read the next one, or close."""
        self.busy, self.exchange = False, None
        if self.gone or self.transport is None:
            return
        if not keep_alive:
            self.transport.close()
            return
        self.transport.resume_reading()
        self._arm()
        self._parse()

    def refuse(self, status: int, message: str) -> None:
        """An error of the edge's own, then the connection is closed (what follows cannot be trusted)."""
        self.write(json_response(status, {"error": {"code": "bad_request" if status < 500 else "unavailable", "message": message}}, close=True))
        self.busy = True  # read nothing more
        if self.transport is not None:
            self.transport.close()

    def _parse(self) -> None:
        """Read what arrived; serve the next whole request, or refuse what does not parse."""
        if self.buf and self.refusal is None:
            data = bytes(self.buf)
            self.buf.clear()
            try:
                self.reader.feed(data)
            except http1.HeadTooLarge:
                self.refusal = (431, "request head larger than the edge takes (PARLEY_EDGE_MAX_HEAD)")
            except http1.BodyTooLarge:
                self.refusal = (413, "request body larger than the edge holds (PARLEY_EDGE_MAX_BODY)")
            except http1.FramingError as exc:
                self.refusal = (400, f"not a request the edge can read: {exc}")
        if self.reader.requests:
            request = self.reader.requests.popleft()
            self.busy = True
            if self._idle is not None:
                self._idle.cancel()
            asyncio.ensure_future(self.edge.serve(self, request.head, request.body))
        elif self.refusal is not None:
            self.refuse(*self.refusal)
        elif (waiting := self.reader.waiting) is not None and waiting is not self.continued:
            if (waiting.get(b"expect") or b"").lower() == b"100-continue":
                self.continued = waiting
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _arm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(self.edge.settings.idle_s, self._expire)

    def _expire(self) -> None:
        if not self.busy and self.transport is not None:
            self.transport.close()


def json_response(status: int, body: object, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Content Too Large", 431: "Request Header Fields Too Large",
              502: "Bad Gateway", 503: "Service Unavailable"}.get(status, "")  # fmt: skip
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
    return (head + ("connection: close\r\n" if close else "") + "\r\n").encode() + data


# ------------------------------------------------------------------ the gateways


@dataclass
class GatewayState:
    host: str
    port: int
    up: bool = True  # what the last health check (or a refused connection since) said
    shard: str | None = None  # what its /readyz says it is
    idle: list[Upstream] | None = None


class Edge:
    def __init__(self, settings: EdgeSettings) -> None:
        self.settings = settings
        self.gateways = [GatewayState(host, port, idle=[]) for host, port in settings.addresses]
        self.partitions = TOPICS["chat.tokens"].partitions
        self.clients: set[Client] = set()
        self.checked = False
        self._rr = itertools.count()

    # -------------------------------------------------------------- serving one request

    async def serve(self, client: Client, request: http1.Head, body: bytes) -> None:
        keep = False
        try:
            keep = await self._serve(client, request, body)
        except Exception:  # one request's trouble must not take the edge down
            log.exception("request failed in the edge")
            client.write(json_response(502, {"error": {"code": "unavailable", "message": "the edge failed"}}, close=True))
        finally:
            client.served(keep and not request.wants_close())

    async def _serve(self, client: Client, request: http1.Head, body: bytes) -> bool:
        """Send ``request`` on; whether the client's connection may carry another."""
        method, target, _ = request.start
        if target.startswith("/edge/"):
            return self._own(client, target)
        cursor = request.get(b"last-event-id")
        chosen = route(target, cursor.decode("latin-1") if cursor else None, self.partitions)
        partition, how = chosen.partition, chosen.how
        n = len(self.gateways)
        reroute = partition is None and n > 1  # a gateway that finds the stream another's may send it on
        candidates = order(partition, [g.up for g in self.gateways], next(self._rr))
        i = 0
        while i < len(candidates) and not client.gone:
            g = candidates[i]
            if partition is not None and g != owner(partition, n):
                how = "failover"
            outcome, exchange = await self._exchange(client, g, request, body, reroute)
            if outcome is None:  # no connection: the next gateway
                i += 1
                continue
            if outcome == Outcome.REROUTE and exchange is not None and exchange.partition is not None:
                partition, how, reroute = exchange.partition % self.partitions, "rerouted", False
                candidates, i = order(partition, [g.up for g in self.gateways], 0), 0
                continue
            if outcome == Outcome.ENDED_EARLY:
                client.write(json_response(502, {"error": {"code": "unavailable", "message": "the gateway closed the connection before answering; retry"}}, close=True))
                return False
            EDGE_ROUTES.labels(how).inc()
            return outcome == Outcome.DONE and exchange is not None and not exchange.close_after
        if not client.gone:
            message = "no gateway is reachable; retry shortly"
            client.write(json_response(503, {"error": {"code": "unavailable", "message": message}}, close=True))
        return False

    async def _exchange(
        self, client: Client, g: int, request: http1.Head, body: bytes, reroute: bool
    ) -> tuple[str | None, Exchange | None]:
        """One try on gateway ``g``: (None, None) when it cannot be reached, else the outcome."""
        state = self.gateways[g]
        upstream = self._idle_connection(state)
        reused = upstream is not None
        head = http1.rebuild(request, DROPPED, (b"X-Parley-Route: reroute",) if reroute else ())
        while True:
            if upstream is None:
                try:
                    upstream = await self._connect(g)
                except (OSError, asyncio.TimeoutError) as exc:
                    EDGE_UPSTREAM_ERRORS.labels(str(g)).inc()
                    if state.up:
                        log.warning("gateway unreachable; trying the next", extra={"gateway": g, "error": type(exc).__name__})
                    state.up = False
                    return None, None
            if client.gone:
                self._release(state, upstream, reusable=True)
                return Outcome.CUT, None
            exchange = Exchange(client, upstream, request.start[0], reroute, self.settings.max_head_bytes)
            upstream.exchange, client.exchange = exchange, exchange
            assert upstream.transport is not None
            upstream.transport.write(head + body)
            outcome = await exchange.result
            upstream.exchange, client.exchange = None, None
            if outcome == Outcome.ENDED_EARLY and reused and not client.gone:
                upstream.close()  # a kept-alive connection the gateway had closed meanwhile: once more, on a new one
                upstream, reused = None, False
                continue
            self._release(state, upstream, exchange.reusable and not exchange.close_after and outcome in (Outcome.DONE, Outcome.REROUTE))
            return outcome, exchange

    async def _connect(self, g: int) -> Upstream:
        state = self.gateways[g]
        loop = asyncio.get_running_loop()
        _, protocol = await asyncio.wait_for(
            loop.create_connection(lambda: Upstream(g), state.host, state.port), self.settings.connect_timeout_s
        )
        return protocol

    def _idle_connection(self, state: GatewayState) -> Upstream | None:
        assert state.idle is not None
        while state.idle:
            upstream = state.idle.pop()
            if not upstream.closed:
                return upstream
        return None

    def _release(self, state: GatewayState, upstream: Upstream, reusable: bool) -> None:
        assert state.idle is not None
        if reusable and not upstream.closed and len(state.idle) < MAX_IDLE and upstream.transport is not None:
            upstream.transport.resume_reading()
            state.idle.append(upstream)
        else:
            upstream.close()

    def _own(self, client: Client, target: str) -> bool:
        """``/edge/readyz``: ready once a gateway is; what each one said."""
        if target.split("?", 1)[0] != "/edge/readyz":
            client.write(json_response(404, {"error": {"code": "not_found", "message": "the edge serves /edge/readyz"}}))
            return True
        gateways = [{"url": f"http://{g.host}:{g.port}", "up": g.up, "shard": g.shard} for g in self.gateways]
        ready = self.checked and any(g.up for g in self.gateways)
        client.write(json_response(200 if ready else 503, {"ready": ready, "gateways": gateways}))
        return True

    # -------------------------------------------------------------- health

    async def watch(self) -> None:
        """Each gateway's /readyz every PARLEY_EDGE_HEALTH_S: up, and the shard it says it is."""
        while True:
            await asyncio.gather(*(self._check(g) for g in range(len(self.gateways))))
            self.checked = True
            await asyncio.sleep(self.settings.health_s)

    async def _check(self, g: int) -> None:
        state = self.gateways[g]
        try:
            up, shard = await asyncio.wait_for(readiness(state.host, state.port), max(0.5, self.settings.health_s))
        except (OSError, asyncio.TimeoutError, http1.FramingError, ValueError):
            up, shard = False, state.shard
        if up != state.up:
            (log.info if up else log.warning)("gateway ready" if up else "gateway not ready", extra={"gateway": g})
        n = len(self.gateways)
        if up and shard != state.shard and n > 1 and shard != f"{g}/{n}":
            log.error(
                "gateway runs as another shard than its place in PARLEY_EDGE_GATEWAYS: its streams will borrow partitions",
                extra={"gateway": g, "shard": shard, "expected": f"{g}/{n}"},
            )
        state.up, state.shard = up, shard


async def readiness(host: str, port: int) -> tuple[bool, str | None]:
    """``GET /readyz`` on a connection of its own: (answered 200, the shard it names)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        raw = await reader.read()  # to the close the request asked for
    finally:
        writer.close()
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0:
        raise http1.FramingError("no response head")
    head = http1.parse_head(raw[: head_end + 4])
    framing = http1.response_body(head, "GET")
    body = raw[head_end + 4 :] if isinstance(framing, http1.Length) else b""  # the gateway's JSONResponse has a length
    found = json.loads(body) if body else {}
    shard = found.get("shard") if isinstance(found, dict) else None
    return http1.status_of(head) == 200, shard if isinstance(shard, str) else None


async def run(settings: EdgeSettings, stop: asyncio.Event) -> None:
    edge = Edge(settings)
    watcher = asyncio.create_task(edge.watch())
    server = await asyncio.get_running_loop().create_server(lambda: Client(edge), settings.host, settings.port, backlog=1024)
    log.info("edge serving", extra={"port": settings.port, "gateways": len(edge.gateways)})
    try:
        await stop.wait()
    finally:
        server.close()
        watcher.cancel()
        for client in list(edge.clients):  # live streams are cut: their clients resume through another edge
            if client.transport is not None:
                client.transport.close()
        await server.wait_closed()
