"""The torch backend's scheduler, with the tiny random model and no HTTP.

Batching must not change what a request generates: greedy replies decoded in
one batch (joining and leaving it at different steps, left-padded to each
other) equal the replies decoded alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from parley.settings import from_env
from workers.engine import protocol
from workers.engine.protocol import GenerateInput, Progress, Sampling
from workers.engine.batcher import TorchBackend
from workers.engine.settings import EngineSettings

PROMPTS = ["Hello there", "A much longer prompt than the others, to force left padding", "x", "Fourth one"]
LENGTHS = [12, 5, 9, 7]  # different lengths: requests leave the batch at different steps


def settings(**kw: object) -> EngineSettings:
    return replace(from_env(EngineSettings, {}), backend="random", context_length=256, max_total_tokens=4096, **kw)


async def run(backend: TorchBackend, prompts: list[str], lengths: list[int], stagger: bool) -> list[Progress]:
    # Staggered: each request joins once the one before it has its first token, so it joins a batch
    # in flight (a fixed sleep raced the tiny model: on an idle machine the first one was already done).
    started = [asyncio.Event() for _ in prompts]

    async def one(i: int) -> Progress:
        if stagger and i > 0:
            await started[i - 1].wait()
        gen = GenerateInput(f"r{i}", prompts[i], Sampling(max_new_tokens=lengths[i], temperature=0.0, ignore_eos=True), True)
        steps = []
        async for p in backend.submit(gen).progress():
            steps.append(p)
            started[i].set()
        return protocol.joined(steps)

    return await asyncio.gather(*(one(i) for i in range(len(prompts))))


@pytest.fixture
async def batched() -> TorchBackend:
    backend = TorchBackend(settings(max_batch=4))
    await backend.start()
    yield backend
    await backend.stop()


async def test_batched_greedy_replies_equal_solo_replies(batched: TorchBackend) -> None:
    solo = TorchBackend(settings(max_batch=1))
    await solo.start()
    try:
        alone = await run(solo, PROMPTS, LENGTHS, stagger=False)
    finally:
        await solo.stop()
    together = await run(batched, PROMPTS, LENGTHS, stagger=True)
    assert [p.output_ids for p in together] == [p.output_ids for p in alone]
    assert [p.text for p in together] == [p.text for p in alone]
    assert [len(p.output_ids) for p in together] == LENGTHS
    assert all(p.finish_reason == protocol.finish_length(n) for p, n in zip(together, LENGTHS))
    load = batched.load().internal
    assert load["max_decode_batch_size"] >= 2
    assert load["decode_tokens"] > load["decode_steps"]  # several requests per forward pass
    assert solo.load().internal["max_decode_batch_size"] == 1


async def test_max_batch_queues_the_rest_and_abort_frees_them(batched: TorchBackend) -> None:
    small = TorchBackend(settings(max_batch=1))
    await small.start()
    try:
        long = small.submit(GenerateInput("long", "a", Sampling(max_new_tokens=200, temperature=0.0, ignore_eos=True), True))
        queued = small.submit(GenerateInput("queued", "b", Sampling(max_new_tokens=2, temperature=0.0), True))
        stream = long.progress()
        await stream.__anext__()  # running now
        assert small.load().waiting == 1 and small.load().running == 1
        small.abort("queued")
        last = protocol.joined([p async for p in queued.progress()])
        assert last.finish_reason == protocol.ABORT_BEFORE_PREFILL and last.output_ids == ()
        small.abort("long")
        final = protocol.joined([p async for p in stream])
        assert final.finish_reason == protocol.finish_abort()
        assert 0 < final.completion_tokens < 200
    finally:
        await small.stop()


async def test_prompt_longer_than_context_is_refused(batched: TorchBackend) -> None:
    with pytest.raises(protocol.InvalidRequest, match=r"longer than the model's context length \(256 tokens\)"):
        batched.submit(GenerateInput("big", "z" * 300, Sampling(), True))


async def test_stop_string_and_duplicate_rid(batched: TorchBackend) -> None:
    first = await run(batched, ["Hello there"], [12], stagger=False)
    text = first[0].text
    stop = text[3:5]
    if not stop or "\ufffd" in stop:
        pytest.skip("the random model's greedy reply has no clean two-character stop")
    gen = GenerateInput("s", "Hello there", Sampling(max_new_tokens=12, temperature=0.0, ignore_eos=True, stop=(stop,)), True)
    state = batched.submit(gen)
    with pytest.raises(protocol.InvalidRequest, match="Duplicate request ID"):
        batched.submit(gen)
    last = protocol.joined([p async for p in state.progress()])
    assert last.finish_reason == protocol.finish_stop_str(stop)
    assert last.text == text[: text.find(stop)]
