"""A TCP proxy in front of a Kafka listener that cuts its clients off at a chosen request, or slows them.

Armed with a topic name, the proxy lets everything through until a client sends a Produce request
for that topic; that request and everything after it, on every connection, either way, then waits
in the proxy (sockets stay open) until ``release``: to its clients the broker stopped answering
exactly when they were writing there, as across a network partition. Requests are framed by
Kafka's size prefix; a Produce request (api key 0) names its topics in plain text, ahead of its
(compressed) records.

Set ``delay_s`` and every request and response frame it carries waits that long first (a slow
broker, or a slow network to it); 0 again and traffic flows as before.

It runs its own event loop in a thread, so a test blocked in a synchronous call never stalls the
traffic it carries.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from concurrent.futures import Future

PRODUCE = 0


class KafkaProxy:
    def __init__(self, listen_port: int, upstream_port: int, host: str = "127.0.0.1") -> None:
        self._listen = (host, listen_port)
        self._upstream = (host, upstream_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kafka-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open: asyncio.Event | None = None  # set while traffic flows (loop thread only)
        self._trip_on: bytes | None = None
        self.tripped = threading.Event()
        self.connections = 0
        self.delay_s = 0.0

    def start(self) -> None:
        self._thread.start()
        self._call(self._serve()).result(10)

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut_at_produce_to(self, topic: str) -> None:
        """Hold all traffic from the first Produce request for ``topic`` on."""
        self._trip_on = topic.encode()

    def release(self) -> None:
        self._trip_on = None
        self._call(self._set_open()).result(5)

    def _call(self, coro: object) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    async def _set_open(self) -> None:
        assert self._open is not None
        self._open.set()

    async def _serve(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._connection, *self._listen)

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_r, up_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._requests(client_r, up_w), self._responses(up_r, client_w), return_exceptions=True)

    async def _requests(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while True:
                size = await src.readexactly(4)
                frame = await src.readexactly(struct.unpack(">i", size)[0])
                (api_key,) = struct.unpack(">h", frame[:2])
                if self._trip_on is not None and api_key == PRODUCE and self._trip_on in frame:
                    self._trip_on = None
                    self._open.clear()
                    self.tripped.set()
                await self._open.wait()
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                dst.write(size + frame)
                await dst.drain()
        finally:
            dst.close()

    async def _responses(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while data := await src.read(65536):
                await self._open.wait()
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                dst.write(data)
                await dst.drain()
        finally:
            dst.close()
