"""SGLang's native wire shapes, in one place (the engine's ``io_struct``).

Everything the HTTP layer reads from or writes to the wire is built here, as
plain functions over plain data, so the shapes can be checked against SGLang's
without starting a server:

* ``parse_generate`` turns a ``/generate`` body into a ``GenerateInput`` or
  raises ``InvalidRequest`` with the message SGLang would give;
* ``finish_*`` build SGLang's finish_reason objects (``FINISH_*.to_json()``);
* ``output`` builds one streamed / final output object: cumulative ``text``,
  cumulative ``output_ids`` and ``meta_info``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

#: SGLang's default when sampling_params has no max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128

#: Sampling params SGLang accepts. Those outside ``IMPLEMENTED`` are accepted
#: and ignored (a worker may send them to a real SGLang); anything else is a
#: client bug and is refused with its name.
SGLANG_SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop",
        "stop_token_ids", "stop_regex", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "frequency_penalty", "presence_penalty", "repetition_penalty", "n", "json_schema",
        "regex", "ebnf", "structural_tag", "custom_params", "logit_bias", "sampling_seed",
    }
)
IMPLEMENTED = frozenset(
    {"max_new_tokens", "temperature", "top_p", "top_k", "stop", "ignore_eos", "no_stop_trim", "repetition_penalty"}
)


class InvalidRequest(ValueError):
    """The request cannot be served as sent; SGLang answers these with HTTP 400."""


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k cut, as in SGLang
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    no_stop_trim: bool = False  # keep the matched stop string in the text
    repetition_penalty: float = 1.0  # 1.0: none; over the generated tokens only, as in SGLang

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-6 or self.top_k == 1


@dataclass(frozen=True)
class GenerateInput:
    rid: str
    text: str
    sampling: Sampling
    stream: bool


def parse_generate(body: Any) -> GenerateInput:
    """Validate a ``/generate`` body. Only the single-prompt text form is served."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    text = body.get("text")
    if text is None:
        if body.get("input_ids") is not None or body.get("input_embeds") is not None:
            raise InvalidRequest("This engine serves `text` prompts only; send `text` instead of input_ids.")
        raise InvalidRequest("Either text, input_ids or input_embeds should be provided.")
    if not isinstance(text, str):
        raise InvalidRequest("This engine serves one prompt per request: `text` must be a string, not a batch.")
    rid = body.get("rid")
    if rid is None:
        rid = uuid.uuid4().hex
    elif not isinstance(rid, str) or not rid:
        raise InvalidRequest("`rid` must be a non-empty string.")
    return GenerateInput(rid=rid, text=text, sampling=parse_sampling(body.get("sampling_params")), stream=bool(body.get("stream", False)))


def parse_sampling(raw: Any) -> Sampling:
    if raw is None:
        return Sampling()
    if not isinstance(raw, dict):
        raise InvalidRequest("`sampling_params` must be a JSON object.")
    unknown = sorted(set(raw) - SGLANG_SAMPLING_KEYS)
    if unknown:
        raise InvalidRequest(f"Unknown sampling parameter(s): {', '.join(unknown)}.")
    try:
        max_new = raw.get("max_new_tokens")
        max_new_tokens = DEFAULT_MAX_NEW_TOKENS if max_new is None else int(max_new)
        temperature = float(raw.get("temperature", 1.0))
        top_p = float(raw.get("top_p", 1.0))
        top_k = int(raw.get("top_k", -1))
        repetition_penalty = float(1.0 if raw.get("repetition_penalty") is None else raw["repetition_penalty"])
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"Invalid sampling parameter: {exc}") from exc
    stop_raw = raw.get("stop") or ()
    stop = (stop_raw,) if isinstance(stop_raw, str) else tuple(stop_raw)
    if not all(isinstance(s, str) for s in stop):
        raise InvalidRequest("`stop` must be a string or a list of strings.")
    # The same checks, in the same words, as SGLang's SamplingParams.verify().
    if temperature < 0.0:
        raise InvalidRequest(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise InvalidRequest(f"top_p must be in (0, 1], got {top_p}.")
    if top_k < 1 and top_k != -1:
        raise InvalidRequest(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    if not 0.0 < repetition_penalty <= 2.0:
        raise InvalidRequest(f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}.")
    if max_new_tokens < 0:
        raise InvalidRequest(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
    return Sampling(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        stop=tuple(s for s in stop if s),
        ignore_eos=bool(raw.get("ignore_eos", False)),
        no_stop_trim=bool(raw.get("no_stop_trim", False)),
        repetition_penalty=repetition_penalty,
    )


def check_context(prompt_tokens: int, context_length: int) -> None:
    """SGLang's TokenizerManager._validate_one_request, word for word."""
    if prompt_tokens >= context_length:
        raise InvalidRequest(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({context_length} tokens)."
        )


# ------------------------------------------------------------ finish reasons


def finish_stop_str(matched: str) -> dict[str, Any]:
    return {"type": "stop", "matched": matched}


def finish_stop_token(token_id: int) -> dict[str, Any]:
    return {"type": "stop", "matched": token_id}


def finish_length(length: int) -> dict[str, Any]:
    return {"type": "length", "length": length}


def finish_abort(message: str = "Aborted", status_code: int | None = None, err_type: str | None = None) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": status_code, "err_type": err_type}


#: What SGLang's TokenizerManager sends for a request aborted while still queued.
ABORT_BEFORE_PREFILL = {"type": "abort", "message": "Abort before prefill"}


# ------------------------------------------------------------ outputs


@dataclass(frozen=True)
class Progress:
    """The state of one request after an engine step: what an output object reports."""

    text: str  # cumulative detokenized reply
    output_ids: tuple[int, ...]  # cumulative generated token ids
    prompt_tokens: int
    cached_tokens: int
    finish_reason: dict[str, Any] | None = None


def output(rid: str, p: Progress, e2e_latency: float | None = None) -> dict[str, Any]:
    """One output object as SGLang's ``/generate`` streams it (non-incremental mode)."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": p.finish_reason,
        "prompt_tokens": p.prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": len(p.output_ids),
        "cached_tokens": p.cached_tokens,
    }
    if p.finish_reason is not None and e2e_latency is not None:
        meta["e2e_latency"] = e2e_latency
    return {"text": p.text, "output_ids": list(p.output_ids), "meta_info": meta}


def error_body(message: str) -> dict[str, Any]:
    """The body of SGLang's 400 answers and of its in-stream error event."""
    return {"error": {"message": message}}
