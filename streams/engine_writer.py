"""Asks the small pool's engine for a short text (a summary, a title), greedily, within a deadline.

The context builder asks for a summary at most once per window move of a
branch (the result is stored and reused), in the background, as the window
nears the move; no turn waits for it. The titler asks
once per conversation, after its first reply. Nobody waits on either, so they
go at the engine's lowest priority (``workers.priority.BACKGROUND``), behind
interactive turns. Neither ever fails a turn: every engine error becomes
``WriterUnavailable``, the text is left out, and for ``retry_s`` after a
failure nothing is asked again, so an engine outage costs one timeout, not one
per turn.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

from schemas.events import PromptMessage
from workers.chat_template import CHATML, ChatTemplate
from workers.engine_api import EngineClient, EngineError, GenerateRequest
from workers.priority import BACKGROUND


class WriterUnavailable(Exception):
    """The engine could not write the text now (down, too slow, refused, or wrote nothing)."""


class EngineWriter:
    def __init__(
        self,
        engine: EngineClient,
        *,
        timeout_s: float,
        retry_s: float,
        purpose: str = "summary",
        template: ChatTemplate = CHATML,
    ) -> None:
        self._engine = engine
        #: The small pool's chat template (PARLEY_POOL_TEMPLATES): prompts are rendered as its workers render them.
        self._template = template
        self._purpose = purpose  # in the engine request's id and in errors
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._failed_at: float | None = None
        self._model: str | None = None

    def ready(self) -> bool:
        """False while the last failure is recent: the turn goes on without a new summary."""
        return self._failed_at is None or time.monotonic() - self._failed_at >= self._retry_s

    async def write(
        self, messages: Sequence[PromptMessage], max_tokens: int, stop: tuple[str, ...] = (), opening: str = ""
    ) -> tuple[str, str]:
        """(text, model that wrote it) for ``messages``, the reply begun with ``opening``; raises WriterUnavailable."""
        prompt = self._template.render_prompt(messages, opening)
        try:
            text = await asyncio.wait_for(self._generate(prompt, max_tokens, stop), self._timeout_s)
        except (EngineError, asyncio.TimeoutError, WriterUnavailable) as exc:
            self._failed_at = time.monotonic()
            what = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"{type(exc).__name__}: {exc}"
            raise WriterUnavailable(f"engine {what}") from exc
        self._failed_at = None
        return text, self._model or ""

    async def _generate(self, prompt: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        if self._model is None:
            self._model = (await self._engine.model_info()).model
        # Greedy: the text is written once and read on many turns; no reason to sample.
        request = GenerateRequest(
            rid=f"{self._purpose}-{uuid.uuid4().hex}", text=prompt, max_new_tokens=max_tokens, temperature=0.0,
            stop=(*self._template.stop, *stop), priority=BACKGROUND,
        )
        parts: list[str] = []
        async for delta in self._engine.generate(request):
            parts.append(delta.text)
            if delta.finish_reason is not None and delta.finish_reason not in ("stop", "length"):
                raise WriterUnavailable(f"generation ended {delta.finish_reason}: {delta.error or ''}")
        text = "".join(parts).strip()
        if not text:
            raise WriterUnavailable(f"the engine wrote an empty {self._purpose}")
        return text

    async def close(self) -> None:
        close = getattr(self._engine, "close", None)
        if close is not None:
            await close()
