"""What a worker needs from an engine: the contract between ``workers/worker.py``
and ``workers/sglang.py`` (SGLang's native HTTP API, spoken by a real SGLang
server or by Parley's CPU engine alike).

Errors::

    EngineError
     ├── EngineUnavailable   cannot connect / 5xx / timeout: the request may be retried elsewhere
     └── EngineRejected      the engine refused this request (4xx, e.g. prompt too long): do not retry
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


class EngineError(Exception):
    pass


class EngineUnavailable(EngineError):
    pass


class EngineRejected(EngineError):
    pass


@dataclass(frozen=True)
class GenerateRequest:
    rid: str  # unique per attempt (parley.ids.engine_rid); /abort_request uses it
    text: str  # the rendered prompt
    max_new_tokens: int
    temperature: float = 0.7
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None  # SGLang's ``sampling_seed``: the same seed and prompt sample the same reply
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    json_schema: str | None = None  # structured output: the reply must match this JSON Schema
    structural_tag: str | None = None  # SGLang's: free text, and each call from its trigger on constrained
    top_k: int | None = None  # sample among the k most likely tokens (None: no cut)
    min_p: float | None = None  # drop tokens below min_p x the most likely one's probability
    repetition_penalty: float | None = None  # SGLang's: logits of generated tokens divided by it (1: none)
    ignore_eos: bool = False  # generate past the end token, to max_new_tokens (benchmarks)
    stop_token_ids: tuple[int, ...] = ()  # token ids that end the reply like the end token
    min_new_tokens: int = 0  # the end token and stop_token_ids are held back until this many tokens
    priority: int | None = None  # SGLang's request priority (higher first under --enable-priority-scheduling)
    skip_special_tokens: bool = True  # False: special tokens stay in the text (a tool-call format made of them)


@dataclass(frozen=True)
class EngineDelta:
    """One step of a streamed generation, already turned from SGLang's cumulative text into a delta."""

    text: str  # new text since the previous delta
    completion_tokens: int  # cumulative tokens generated so far
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str | None = None  # on the last delta: stop | length | cancelled (aborted) | failed
    error: str | None = None  # set when finish_reason is "failed"


@dataclass(frozen=True)
class EngineLoad:
    running: int
    queued: int
    max_running: int
    kv_usage: float  # 0..1
    cache_hit_rate: float  # 0..1


@dataclass(frozen=True)
class ModelInfo:
    model: str  # the served model name / path
    context_length: int
    untrained: bool = False  # True for the CPU engine's randomly initialised model


class EngineClient(Protocol):
    def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        """Stream deltas until one carries finish_reason. Raises EngineError before the first delta if refused."""
        ...

    async def abort(self, rid: str) -> None: ...

    async def load(self) -> EngineLoad: ...

    async def model_info(self) -> ModelInfo: ...

    async def health(self) -> bool: ...

    async def close(self) -> None: ...
