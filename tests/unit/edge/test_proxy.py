"""The edge in front of stand-in gateways (tests/unit/edge/fake_gateway.py), all in this process on
localhost: streams pass through unbuffered and unchanged, to the owner, with the headers they came
with; a 421 sends a request on to the owner; a gateway down is skipped; a client that leaves is seen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from edge.proxy import run
from edge.settings import EdgeSettings
from parley.partitioning import partition_for
from tests.unit.edge.fake_gateway import FakeGateway, free_port

pytestmark = pytest.mark.asyncio(loop_scope="session")

FOREIGN = 5  # the partition the fakes' regenerate belongs to: gateway 1 of 2 owns it


class Running:
    def __init__(self, url: str, gateways: list[FakeGateway]) -> None:
        self.url, self.gateways = url, gateways


@pytest_asyncio.fixture(loop_scope="session")
async def edge() -> AsyncIterator[Running]:
    gateways = [FakeGateway(i, 2, FOREIGN) for i in range(2)]
    for g in gateways:
        await g.start()
    port = free_port()
    settings = EdgeSettings(port=port, gateways=",".join(f"http://127.0.0.1:{g.port}" for g in gateways), health_s=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(run(settings, stop))
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(100):
            try:
                if (await http.get(f"{url}/edge/readyz")).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    yield Running(url, gateways)
    stop.set()
    await task
    for g in gateways:
        await g.stop()


def conversation_owned_by(gateway: int) -> str:
    return next(f"c-{i}" for i in range(1000) if partition_for(f"c-{i}", 12) % 2 == gateway)


async def test_a_stream_goes_to_its_owner_whole_with_its_headers(edge: Running) -> None:
    for owner in (0, 1):
        cid = conversation_owned_by(owner)
        headers = {"Authorization": "Bearer k-1", "Last-Event-ID": "3:1", "X-Parley-Route": "reroute"}
        async with httpx.AsyncClient(base_url=edge.url) as http:
            through = await http.post(f"/v1/conversations/{cid}/messages?n=4", json={"content": "hi"}, headers=headers)
            direct = await httpx.AsyncClient().post(
                f"http://127.0.0.1:{edge.gateways[owner].port}/v1/conversations/{cid}/messages?n=4", json={"content": "hi"}
            )
        assert through.status_code == 200 and through.headers["x-gateway"] == str(owner)
        assert through.text == direct.text, "the SSE bytes arrive as the gateway wrote them"
        seen = edge.gateways[owner].seen[-2]
        assert seen["authorization"] == "Bearer k-1" and seen["last-event-id"] == "3:1"
        assert "x-parley-route" not in seen, "a client cannot ask a gateway for a 421"
        assert seen["body"] == '{"content":"hi"}'


async def test_deltas_are_not_held_back(edge: Running) -> None:
    cid = conversation_owned_by(1)
    arrivals = []
    async with httpx.AsyncClient(base_url=edge.url) as http:
        began = time.monotonic()
        async with http.stream("POST", f"/v1/conversations/{cid}/messages?n=3&pause=0.3", json={}) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: delta"):
                    arrivals.append(time.monotonic() - began)
    assert len(arrivals) == 3
    assert arrivals[0] < 0.6 and arrivals[2] - arrivals[0] > 0.45, arrivals


async def test_one_connection_carries_requests_to_different_gateways(edge: Running) -> None:
    limits = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(base_url=edge.url, limits=limits) as http:
        served = []
        for owner in (0, 1, 0, 1):
            response = await http.post(f"/v1/conversations/{conversation_owned_by(owner)}/messages?n=1", json={})
            served.append(response.headers["x-gateway"])
        assert served == ["0", "1", "0", "1"]


async def test_a_resume_with_a_cursor_goes_to_the_owner_of_its_partition(edge: Running) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as http:
        for partition in (6, 7):
            response = await http.get("/v1/messages/m/stream?n=1", headers={"Last-Event-ID": f"{partition}:41"})
            assert response.headers["x-gateway"] == str(partition % 2)
        by_query = await http.get("/v1/messages/m/stream?n=1&last_event_id=7:41")
        assert by_query.headers["x-gateway"] == "1"


async def test_a_421_sends_the_request_on_to_the_owner(edge: Running) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as http:
        answers = [await http.post("/v1/messages/m/regenerate", json={"client_message_id": "r"}) for _ in range(4)]
    assert [a.status_code for a in answers] == [200] * 4
    assert {a.json()["served_by"] for a in answers} == {FOREIGN % 2}
    asked = [s for g in edge.gateways for s in g.seen if s["path"].endswith("/regenerate")]
    assert len(asked) == 6, "two of the four went first to the other gateway (round-robin), which sent them on"
    assert sum(s.get("x-parley-route") == "reroute" for s in asked) == 4


async def test_other_requests_go_round_robin(edge: Running) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as http:
        served = {(await http.get("/v1/usage")).json()["served_by"] for _ in range(4)}
    assert served == {0, 1}


async def exchange_raw(url: str, *writes: bytes) -> bytes:
    """``writes`` on one connection, a moment apart; everything the edge answers, until it closes."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for data in writes:
            writer.write(data)
            await asyncio.sleep(0.1)
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_pipelined_requests_are_answered_in_order_a_chunked_body_goes_on_whole(edge: Running) -> None:
    chunked = b"POST /v1/echo HTTP/1.1\r\nHost: e\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    closing = b"GET /v1/usage HTTP/1.1\r\nHost: e\r\nConnection: close\r\n\r\n"
    raw = await exchange_raw(edge.url, chunked + closing)
    assert raw.count(b"HTTP/1.1 200 OK") == 2 and b'"body":"abcde"' in raw.split(b"HTTP/1.1 200 OK")[1]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nX-A: " + b"a" * 70_000, b"431"),  # over PARLEY_EDGE_MAX_HEAD's default
        (b"POST /v1/echo HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n" + b"x" * 1_100_000, b"413"),
    ],
)
async def test_what_the_edge_cannot_take_is_refused_after_the_requests_before_it(edge: Running, data: bytes, status: bytes) -> None:
    raw = await exchange_raw(edge.url, b"GET /v1/usage HTTP/1.1\r\nHost: e\r\n\r\n", data)
    first, refusal = raw.split(b"HTTP/1.1 " + status)
    assert first.startswith(b"HTTP/1.1 200 OK") and b"served_by" in first
    assert b'"code": "bad_request"' in refusal and b"connection: close" in refusal


async def test_a_gateway_down_is_skipped_for_the_next_in_the_ring(edge: Running) -> None:
    await edge.gateways[1].stop()
    cid = conversation_owned_by(1)
    async with httpx.AsyncClient(base_url=edge.url) as http:
        for _ in range(3):  # before the health check noticed, and after
            response = await http.post(f"/v1/conversations/{cid}/messages?n=1", json={})
            assert response.status_code == 200 and response.headers["x-gateway"] == "0"
            await asyncio.sleep(0.15)
        ready = (await http.get("/edge/readyz")).json()
    assert [g["up"] for g in ready["gateways"]] == [True, False]


async def test_a_client_that_leaves_mid_stream_closes_the_gateways_stream(edge: Running) -> None:
    cid = conversation_owned_by(0)
    async with httpx.AsyncClient(base_url=edge.url) as http:
        async with http.stream("POST", f"/v1/conversations/{cid}/messages?n=200&pause=0.05", json={}) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: delta"):
                    break
    deadline = time.monotonic() + 3
    while not edge.gateways[0].ended and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert edge.gateways[0].ended, "the gateway saw its client leave"
