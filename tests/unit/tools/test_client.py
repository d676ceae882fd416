"""The test and terminal client's reply deadline: a stream kept open by keep-alive comments ends in an error."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tools.client import ParleyClient


class EndlessStream(httpx.AsyncByteStream):
    """A reply that begins and then only ever sends keep-alive comments."""

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield b'event: message\ndata: {"reply_id": "r"}\n\n'
        while True:
            await asyncio.sleep(0.05)
            yield b": keep-alive\n\n"


def endless(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=EndlessStream())


async def test_a_reply_that_never_ends_fails_at_the_deadline_with_what_it_streamed() -> None:
    client = ParleyClient("http://gateway", "key", timeout=1.0, reply_deadline_s=0.5)
    client._http = httpx.AsyncClient(base_url="http://gateway", transport=httpx.MockTransport(endless))
    try:
        with pytest.raises(TimeoutError, match=r"after 0.5 s; events so far: \['message'\]"):
            await client.send("c", "hello")
    finally:
        await client.close()
