"""Request priority, as SGLang under --enable-priority-scheduling: the CPU engine admits waiting
requests higher priority first (first come, first served within one), and the body's field is checked."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from parley.settings import from_env
from workers.engine import protocol
from workers.engine.batcher import TorchBackend
from workers.engine.protocol import GenerateInput, Sampling
from workers.engine.settings import EngineSettings
from workers.engine.slots import PrioritySlots


async def test_freed_slots_go_to_the_highest_priority_then_the_earliest() -> None:
    slots = PrioritySlots(1)
    await slots.acquire(0)  # held
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        await slots.acquire(priority)
        order.append(name)
        slots.release()

    tasks = [asyncio.create_task(wait(n, p)) for n, p in [("low", 0), ("doc", 10), ("chat-a", 20), ("chat-b", 20)]]
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["chat-a", "chat-b", "doc", "low"]


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    slots = PrioritySlots(1)
    await slots.acquire()
    gone = asyncio.create_task(slots.acquire(50))
    kept = asyncio.create_task(slots.acquire(1))
    await asyncio.sleep(0)
    gone.cancel()
    slots.release()
    await asyncio.wait_for(kept, 1)
    assert gone.cancelled()


async def test_the_torch_backend_admits_waiting_requests_by_priority() -> None:
    settings = replace(from_env(EngineSettings, {}), backend="random", context_length=256, max_total_tokens=4096, max_batch=1)
    backend = TorchBackend(settings)
    await backend.start()
    try:
        first: list[str] = []

        async def one(rid: str, priority: int, tokens: int) -> None:
            gen = GenerateInput(rid, "Hello", Sampling(max_new_tokens=tokens, temperature=0.0, ignore_eos=True), True, priority)
            async for _ in backend.submit(gen).progress():
                if rid not in first:
                    first.append(rid)

        running = asyncio.create_task(one("running", 0, 40))
        while not first:  # the batch of one is busy before the others arrive
            await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(one(r, p, 2)) for r, p in [("background", 0), ("document", 10), ("chat", 20)]]
        await asyncio.gather(running, *waiting)
        assert first == ["running", "chat", "document", "background"]
    finally:
        await backend.stop()


def test_the_body_field_is_an_integer_or_absent() -> None:
    assert protocol.parse_generate({"text": "x", "priority": 7}).priority == 7
    assert protocol.parse_generate({"text": "x", "priority": None}).priority == 0
    assert protocol.parse_generate({"text": "x"}).priority == 0
    for bad in ("high", 1.5, True):
        with pytest.raises(protocol.InvalidRequest, match="priority"):
            protocol.parse_generate({"text": "x", "priority": bad})
