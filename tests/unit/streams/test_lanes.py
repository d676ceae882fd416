"""Lanes: one key's events in order, other keys' events meanwhile, failures not swallowed."""

from __future__ import annotations

import asyncio

import pytest

from streams.lanes import Lanes


async def test_one_key_keeps_its_order_while_another_key_is_not_held_behind_it() -> None:
    done: list[tuple[bytes, int]] = []
    gate, all_done = asyncio.Event(), asyncio.Event()

    async def handle(item: tuple[bytes, int]) -> None:
        key, n = item
        if key == b"slow" and n == 0:
            await gate.wait()  # the first slow event waits (a Cassandra read, an ack)
        done.append(item)
        if len(done) == 6:
            all_done.set()

    lanes: Lanes[tuple[bytes, int]] = Lanes(8, 4, handle)
    assert lanes.lane_of(b"slow") != lanes.lane_of(b"fast")  # the keys of this test take two lanes
    for n in range(3):
        await lanes.put(b"slow", (b"slow", n))
        await lanes.put(b"fast", (b"fast", n))
    await asyncio.sleep(0.01)
    assert done == [(b"fast", 0), (b"fast", 1), (b"fast", 2)]  # not queued behind the waiting one
    gate.set()
    await asyncio.wait_for(all_done.wait(), 1)
    assert [n for k, n in done if k == b"slow"] == [0, 1, 2]  # in arrival order
    await lanes.close()


async def test_a_full_lane_holds_the_reader_back() -> None:
    gate = asyncio.Event()

    async def handle(item: int) -> None:
        await gate.wait()

    lanes: Lanes[int] = Lanes(1, 2, handle)
    for n in range(3):  # one running, two queued
        await lanes.put(b"k", n)
    blocked = asyncio.ensure_future(lanes.put(b"k", 3))
    await asyncio.sleep(0.1)
    assert not blocked.done()
    gate.set()
    await asyncio.wait_for(blocked, 1)
    await lanes.close()


async def test_a_handler_that_raises_fails_the_next_put() -> None:
    async def handle(item: int) -> None:
        raise RuntimeError("a bug")

    lanes: Lanes[int] = Lanes(2, 2, handle)
    await lanes.put(b"k", 1)
    await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError, match="a bug"):
        await lanes.put(b"other", 2)
    await lanes.close()
