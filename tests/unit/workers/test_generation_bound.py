"""A reply ends ``length`` at its byte bound, whatever its token cap: its completion must stay readable
(no consumer reads a record over 512 KiB, and the completion carries the whole text, sealed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from workers.coalesce import Coalescer, Piece
from workers.engine_api import EngineDelta, GenerateRequest
from workers.generation import REPLY_MAX_BYTES, Generation
from parley.consumer import DEFAULT_MAX_EVENT_BYTES


class _Endless:
    """An engine that would go on far past any bound (an uncapped call to a long-context pool)."""

    def __init__(self, piece: str, steps: int) -> None:
        self.piece, self.steps = piece, steps

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        for i in range(self.steps):
            last = i == self.steps - 1
            yield EngineDelta(self.piece, i + 1, 10, 0, finish_reason="stop" if last else None)
            await asyncio.sleep(0)


def _run(engine: _Endless, max_text_bytes: int) -> tuple[str, str, str]:
    shown: list[Piece] = []
    request = GenerateRequest(rid="r", text="p", max_new_tokens=10**6)
    gen = Generation(engine, request, Coalescer(0.0, 1), shown.append, max_text_bytes=max_text_bytes)  # type: ignore[arg-type]
    outcome = asyncio.run(gen.run())
    return outcome.finish_reason, outcome.text, "".join(p.text for p in shown)


def test_a_reply_stops_at_its_byte_bound_with_what_was_streamed_equal_to_what_is_kept() -> None:
    reason, text, streamed = _run(_Endless("é" * 50, 100), max_text_bytes=1000)  # 100 bytes a step
    assert reason == "length"
    assert len(text.encode()) == 1000  # ten whole steps, not the eleventh
    assert streamed == text


def test_a_reply_under_the_bound_ends_as_the_engine_says() -> None:
    reason, text, _ = _run(_Endless("ab", 5), max_text_bytes=1000)
    assert (reason, text) == ("stop", "ab" * 5)


def test_the_default_bound_sealed_fits_a_record() -> None:
    sealed = (REPLY_MAX_BYTES + 12 + 16) * 4 // 3 + 4  # nonce, tag, base64
    assert sealed < DEFAULT_MAX_EVENT_BYTES - 64 * 1024  # room for the envelope, usage, citations
