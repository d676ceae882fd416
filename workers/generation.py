"""One generation: stream an engine's deltas, hand out coalesced pieces, end in an Outcome.

A reader task pulls the engine's stream into an inbox so the loop here can
wait for "the next delta or the coalescer's deadline, whichever is first"
without cancelling the engine's iterator mid-step (that would close it). The
deadline is one timer per piece (``call_at`` putting a tick in the inbox), not
a timeout around every wait: at 30 tokens/s across hundreds of streams, a
timer armed and cancelled per delta was the worker's largest cost.
``stop()`` ends the loop at once: the worker calls it when a cancelled stream
does not end in time on its own.

A reply ends ``length`` at ``max_text_bytes`` of text, whatever the token cap: its
``GenerationCompleted`` carries the whole text, sealed (base64, 4/3 of it), and no
consumer reads a record over ``DEFAULT_MAX_EVENT_BYTES`` (an uncapped OpenAI call
to a long-context pool could otherwise write a completion nobody can read).
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

#: Text of one reply at most (UTF-8 bytes): sealed, 427 KiB of the 512 KiB a record may have
#: (``parley.consumer.DEFAULT_MAX_EVENT_BYTES``, not imported: a core loads no Kafka client), the rest
#: for the envelope. tests/unit/workers/test_generation_bound.py checks the two agree.
REPLY_MAX_BYTES = 320 * 1024

_FORCED = object()  # stop() was called
_ENDED = object()  # the engine's stream ended without a finish_reason
_TICK = object()  # the coalescer's deadline may have passed


class Generation:
    def __init__(
        self,
        engine: EngineClient,
        request: GenerateRequest,
        coalescer: Coalescer,
        emit: Callable[[Piece], None],
        clock: Callable[[], float] = time.monotonic,
        max_text_bytes: int = REPLY_MAX_BYTES,
    ) -> None:
        self._engine = engine
        self._max_text_bytes = max_text_bytes
        self._request = request
        self._coalescer = coalescer
        self._emit = emit
        self._clock = clock
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None  # the deadline the timer is armed for
        self.started = False  # the engine produced at least one delta

    def stop(self) -> None:
        """Stop reading now; the outcome is cancelled with the text so far."""
        self._inbox.put_nowait(_FORCED)

    async def run(self) -> Outcome:
        submitted = self._clock()
        reader = asyncio.create_task(self._read(), name=f"engine-stream {self._request.rid}")
        parts: list[str] = []
        text_bytes = 0
        usage = Usage()
        seen_tokens = 0
        first: float | None = None
        last: float | None = None
        reason: str
        code: str | None = None
        message: str | None = None
        try:
            while True:
                self._arm()
                item = await self._inbox.get()
                if item is _TICK:  # the coalescer's deadline passed, or a stale tick of an earlier one
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
                text_bytes += len(delta.text.encode())
                if text_bytes > self._max_text_bytes:  # this delta is not shown: the reply ends before it
                    reason = "length"
                    break
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
            if self._timer is not None:
                self._timer.cancel()
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

    def _arm(self) -> None:
        """Have a tick put in the inbox when the coalescer's deadline comes (once per deadline).

        The clock is the caller's and the loop's timer runs on the loop's own, so the delay is taken
        from the caller's clock and the loop's time added: a tick never comes early by the caller's clock
        by more than their drift, and an early tick finds nothing due (poll) and re-arms.
        """
        due = self._coalescer.due_at
        if due == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = due
        if due is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, due - self._clock())
            self._timer = loop.call_at(loop.time() + delay, self._tick)

    def _tick(self) -> None:
        self._timer_at = None  # fired: the next _arm arms again if text is still held
        self._timer = None
        self._inbox.put_nowait(_TICK)

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
