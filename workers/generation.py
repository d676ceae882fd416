"""One generation: stream an engine's deltas, hand out coalesced pieces, end in an Outcome.

A reader task pulls the engine's stream into an inbox so the loop here can
wait for "the next delta or the coalescer's deadline, whichever is first"
without cancelling the engine's iterator mid-step (that would close it).
``stop()`` ends the loop at once: the worker calls it when a cancelled stream
does not end in time on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from schemas.events import Usage
from workers.coalesce import Coalescer, Piece
from workers.engine_api import EngineClient, EngineDelta, EngineError, GenerateRequest
from workers.outcome import Outcome, from_engine_finish, from_error

log = logging.getLogger(__name__)

_FORCED = object()  # stop() was called
_ENDED = object()  # the engine's stream ended without a finish_reason


class Generation:
    def __init__(
        self,
        engine: EngineClient,
        request: GenerateRequest,
        coalescer: Coalescer,
        emit: Callable[[Piece], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._request = request
        self._coalescer = coalescer
        self._emit = emit
        self._clock = clock
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.started = False  # the engine produced at least one delta

    def stop(self) -> None:
        """Stop reading now; the outcome is cancelled with the text so far."""
        self._inbox.put_nowait(_FORCED)

    async def run(self) -> Outcome:
        submitted = self._clock()
        reader = asyncio.create_task(self._read(), name=f"engine-stream {self._request.rid}")
        parts: list[str] = []
        usage = Usage()
        seen_tokens = 0
        first: float | None = None
        last: float | None = None
        reason: str
        code: str | None = None
        message: str | None = None
        try:
            while True:
                item = await self._next()
                if item is None:  # the coalescer's deadline passed with text held
                    self._send(self._coalescer.poll(self._clock()))
                    continue
                if item is _FORCED:
                    reason = "cancelled"
                    break
                if item is _ENDED:
                    reason, code = "failed", "engine_protocol"
                    message = "the engine ended the stream without a finish_reason"
                    break
                if isinstance(item, BaseException):
                    reason = "failed"
                    code, message = from_error(item)
                    if not isinstance(item, EngineError):
                        log.error("generation failed in the worker", exc_info=item, extra={"rid": self._request.rid})
                    break
                delta: EngineDelta = item
                self.started = True
                now = self._clock()
                if first is None:
                    first = now
                last = now
                new_tokens = max(0, delta.completion_tokens - seen_tokens)
                seen_tokens = max(seen_tokens, delta.completion_tokens)
                usage = Usage(
                    prompt_tokens=delta.prompt_tokens,
                    cached_tokens=delta.cached_tokens,
                    completion_tokens=delta.completion_tokens,
                )
                parts.append(delta.text)
                self._send(self._coalescer.add(delta.text, new_tokens, now))
                if delta.finish_reason:
                    reason, code, message = from_engine_finish(delta.finish_reason, delta.error)
                    break
        finally:
            if not reader.done():
                reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        self._send(self._coalescer.flush(self._clock()))
        return Outcome(
            finish_reason=reason,
            text="".join(parts),
            usage=usage,
            error_code=code,
            error_message=message,
            ttft_ms=0.0 if first is None else (first - submitted) * 1000,
            duration_ms=0.0 if last is None else (last - submitted) * 1000,
        )

    async def _next(self) -> Any:
        """The next inbox item, or None when the coalescer's deadline comes first."""
        due = self._coalescer.due_at
        if due is None:
            return await self._inbox.get()
        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands as the get completes,
        # and an abandoned generation would then run on. A timed-out get leaves its item in the queue.
        try:
            async with asyncio.timeout(max(0.0, due - self._clock())):
                return await self._inbox.get()
        except TimeoutError:
            return None

    def _send(self, piece: Piece | None) -> None:
        if piece is not None:
            self._emit(piece)

    async def _read(self) -> None:
        stream: Any = None
        try:
            stream = self._engine.generate(self._request)
            async for delta in stream:
                self._inbox.put_nowait(delta)
                if delta.finish_reason:
                    return
            self._inbox.put_nowait(_ENDED)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # translated into a failed outcome by run()
            self._inbox.put_nowait(exc)
        finally:
            # Close the stream now rather than at garbage collection: an HTTP client releases its connection.
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
