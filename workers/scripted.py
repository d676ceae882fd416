"""An in-process ``EngineClient`` that plays a deterministic script.

The in-memory implementation of workers/engine_api.py, next to the HTTP one
(workers/sglang.py): tests drive the worker with it, and it shows what the
contract means in a hundred lines. The reply is ``tok0 tok1 …``; directives in
the prompt text change the script::

    [[tokens:N]]          reply with N tokens (default 24)
    [[step_ms:N]]         wait N ms before each token (default: the engine's step_s)
    [[fail:unavailable]]  raise EngineUnavailable before the first delta
    [[fail:rejected]]     raise EngineRejected before the first delta
    [[fail:midstream]]    stream half the tokens, then end with finish_reason failed
    [[hold:N]]            after N tokens, wait until ``release()`` or an abort (a deterministic "mid-stream")

A prompt whose assistant message already holds ``tok0 tok1 … tok(K-1) `` (a
resumed attempt, workers/recovery.py) continues with ``tokK``, as a model
continuing its own text would: the whole reply is still ``scripted_reply(N)``,
and it does not hold again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from workers.engine_api import (
    EngineDelta,
    EngineLoad,
    EngineRejected,
    EngineUnavailable,
    GenerateRequest,
    ModelInfo,
)

_DIRECTIVE = re.compile(r"\[\[(tokens|step_ms|fail|hold):([a-z0-9]+)\]\]")
_REPLY_START = "<|im_start|>assistant\n"
_DONE_TOKENS = re.compile(r"(?:tok\d+ )*")
DEFAULT_TOKENS = 24


def scripted_reply(tokens: int) -> str:
    """The full reply the script streams for ``tokens`` tokens."""
    return "".join(f"tok{i} " for i in range(tokens))


class ScriptedEngine:
    def __init__(self, *, model: str = "scripted", step_s: float = 0.0, max_running: int = 64) -> None:
        self.model = model
        self.step_s = step_s
        self.max_running = max_running
        self.healthy = True
        self.requests: list[GenerateRequest] = []  # every request, in submission order
        self.aborted: list[str] = []  # rids abort() was called with
        self.holding: set[str] = set()  # rids waiting at their [[hold:N]]
        self._released = asyncio.Event()
        self._abort_flags: dict[str, asyncio.Event] = {}
        self._running = 0

    def release(self) -> None:
        """Let the streams held now go on; later ones hold again at their [[hold:N]]."""
        self._released.set()
        self._released = asyncio.Event()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        directives = dict(_DIRECTIVE.findall(request.text))
        if not self.healthy or directives.get("fail") == "unavailable":
            raise EngineUnavailable("scripted engine: unavailable")
        if directives.get("fail") == "rejected":
            raise EngineRejected("scripted engine: prompt refused")
        self.requests.append(request)
        _, reply_start, reply = request.text.rpartition(_REPLY_START)
        done = _DONE_TOKENS.match(reply) if reply_start else None
        start = done.group().count("tok") if done else 0  # tokens a resumed attempt continues after
        total = min(int(directives.get("tokens", DEFAULT_TOKENS)), start + request.max_new_tokens)
        step = int(directives["step_ms"]) / 1000 if "step_ms" in directives else self.step_s
        fail_at = total // 2 if directives.get("fail") == "midstream" else None
        hold_at = int(directives["hold"]) if "hold" in directives else None
        aborted = self._abort_flags.setdefault(request.rid, asyncio.Event())
        prompt_tokens = max(1, len(request.text) // 4)
        self._running += 1
        try:
            for i in range(start, total):
                if step:
                    await asyncio.sleep(step)
                if i == hold_at and start == 0:  # a resumed attempt runs through: the hold was its predecessor's
                    self.holding.add(request.rid)
                    await _first(self._released.wait(), aborted.wait())
                    self.holding.discard(request.rid)
                if aborted.is_set():
                    yield EngineDelta("", i - start, prompt_tokens, 0, finish_reason="cancelled")
                    return
                if i == fail_at:
                    yield EngineDelta("", i - start, prompt_tokens, 0, finish_reason="failed", error="scripted failure")
                    return
                last = i == total - 1
                finish = ("length" if total == start + request.max_new_tokens else "stop") if last else None
                yield EngineDelta(f"tok{i} ", i + 1 - start, prompt_tokens, 0, finish_reason=finish)
            if start >= total:
                yield EngineDelta("", 0, prompt_tokens, 0, finish_reason="stop")
        finally:
            self._running -= 1
            self.holding.discard(request.rid)
            self._abort_flags.pop(request.rid, None)

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        # An abort may overtake its request's first step; the flag waits for it.
        self._abort_flags.setdefault(rid, asyncio.Event()).set()

    async def load(self) -> EngineLoad:
        return EngineLoad(
            running=self._running,
            queued=0,
            max_running=self.max_running,
            kv_usage=self._running / self.max_running,
            cache_hit_rate=0.0,
        )

    async def model_info(self) -> ModelInfo:
        return ModelInfo(model=self.model, context_length=4096)

    async def health(self) -> bool:
        return self.healthy

    async def close(self) -> None:
        return None


async def _first(*aws: Coroutine[Any, Any, Any]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
