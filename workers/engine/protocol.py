"""SGLang's native wire shapes, in one place (the engine's ``io_struct``).

Everything the HTTP layer reads from or writes to the wire is built here, as
plain functions over plain data, so the shapes can be checked against SGLang's
without starting a server:

* ``parse_generate`` turns a ``/generate`` body into a ``GenerateInput`` or
  raises ``InvalidRequest`` with the message SGLang would give;
* ``parse_sampling`` reads SGLang's ``sampling_params``: those in ``IMPLEMENTED``
  are applied (with SGLang's range checks and messages; ``json_schema``, ``regex``,
  ``ebnf`` and ``structural_tag`` constrain decoding, ``grammar.py``), those in ``UNSUPPORTED``
  (``n`` > 1, ``stop_regex``, ``custom_params``,
  ``stream_interval``) are refused by name with HTTP 400 unless sent at their
  neutral value; nothing is accepted and then silently ignored (the synthetic
  backend's text is fixed by the prompt: it says which params cannot change
  it, ``synthetic.NO_EFFECT``). ``sampling_seed`` is
  always honoured here, where SGLang honours it only when launched with
  ``--enable-deterministic-inference`` (and then uses 42 for requests without one).
  The body's other SGLang fields (logprobs, images, LoRA, ...: ``UNSUPPORTED_FIELDS``)
  are refused the same way;
* ``finish_*`` build SGLang's finish_reason objects (``FINISH_*.to_json()``);
* ``output`` builds one streamed / final output object: ``text``, ``output_ids``
  (cumulative, or what the event adds under ``--incremental-streaming-output``)
  and ``meta_info``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

#: SGLang's default when sampling_params has no max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128

#: The API fields of SGLang's ``SamplingParams`` (python/sglang/srt/sampling/sampling_params.py); any
#: other key is a client bug and is refused as unknown.
SGLANG_SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop",
        "stop_token_ids", "stop_regex", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "frequency_penalty", "presence_penalty", "repetition_penalty", "n", "json_schema",
        "regex", "ebnf", "structural_tag", "custom_params", "logit_bias", "sampling_seed", "stream_interval",
    }
)
#: What the torch backends (torch, random) apply, the way SGLang applies it.
IMPLEMENTED = frozenset(
    {
        "max_new_tokens", "min_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
        "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
        "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "sampling_seed",
        "json_schema", "regex", "ebnf", "structural_tag",
    }
)
#: SGLang's constrained-decoding params the engine applies (workers/engine/grammar.py); at most one a request.
GRAMMAR_KINDS = ("json_schema", "regex", "ebnf", "structural_tag")


def _absent(value: Any) -> bool:
    return value is None


#: The rest of SGLang's params: accepted at their neutral value (clients send defaults: ``n: 1``,
#: ``json_schema: null``), refused by name with anything else. Never accepted and ignored.
UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (lambda v: v is None or (type(v) in (int, float) and v == 1), "one reply per request: send the request n times"),
    "stop_regex": (lambda v: v is None or v == "" or v == [], "stop strings are supported, stop regexes are not"),
    "custom_params": (lambda v: v is None or v == {}, "custom logit processors need SGLang"),
    "stream_interval": (_absent, "the engine streams after every decode step"),
}
assert IMPLEMENTED | set(UNSUPPORTED) == SGLANG_SAMPLING_KEYS and not IMPLEMENTED & set(UNSUPPORTED)


def _off(value: Any) -> bool:
    return value is None or value is False


#: Fields of SGLang's ``GenerateReqInput`` (its /generate body) beside text, sampling_params, rid and
#: stream: none is served here, so each is refused by name unless sent at its default.
UNSUPPORTED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "return_logprob": (_off, "logprobs need SGLang"),
    "logprob_start_len": (lambda v: v is None or v == -1, "logprobs need SGLang"),
    "top_logprobs_num": (lambda v: v is None or v == 0, "logprobs need SGLang"),
    "token_ids_logprob": (_absent, "logprobs need SGLang"),
    "return_text_in_logprobs": (_off, "logprobs need SGLang"),
    "return_hidden_states": (_off, "hidden states need SGLang"),
    "image_data": (_absent, "the CPU engine serves text models only"),
    "audio_data": (_absent, "the CPU engine serves text models only"),
    "lora_path": (_absent, "LoRA adapters need SGLang"),
    "custom_logit_processor": (_absent, "custom logit processors need SGLang"),
}


class InvalidRequest(ValueError):
    """The request cannot be served as sent; SGLang answers these with HTTP 400."""


@dataclass(frozen=True)
class Grammar:
    """A request's constraint as it was sent: which of ``GRAMMAR_KINDS``, and its text."""

    kind: str
    text: str


@dataclass(frozen=True)
class Sampling:
    """One request's sampling params, checked. Defaults are SGLang's constants (``--sampling-defaults
    openai``); its default, ``model``, takes temperature/top_p/top_k/min_p from generation_config.json
    first, and SmolLM2's names none, so the two agree for the default model.

    The torch backends apply them in this order (``torch_model.sample``): repetition_penalty, then
    frequency/presence penalties, then min_new_tokens' end-token mask, then logit_bias, all on the raw
    logits and over the generated tokens only, then the grammar's mask (as SGLang applies its vocab mask
    after the penalizers and logit_bias); then greedy argmax, or temperature, top_k, top_p, min_p
    and a draw from the request's own generator when it has a sampling_seed.
    """

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k cut, as in SGLang
    min_p: float = 0.0  # keep tokens with probability >= min_p * the most likely one's
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()  # end the reply like EOS (unless ignore_eos)
    ignore_eos: bool = False
    no_stop_trim: bool = False  # keep the matched stop string / stop token in the text
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    repetition_penalty: float = 1.0  # 1.0: none; over the generated tokens only, as in SGLang
    frequency_penalty: float = 0.0  # subtracted once per occurrence in the generated tokens
    presence_penalty: float = 0.0  # subtracted once from every token already generated
    min_new_tokens: int = 0  # EOS and stop_token_ids are masked until this many tokens exist
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    seed: int | None = None  # sampling_seed: this request draws from its own generator
    grammar: Grammar | None = None  # json_schema, regex or ebnf: only tokens the grammar allows are sampled

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-6 or self.top_k == 1


@dataclass(frozen=True)
class GenerateInput:
    rid: str
    text: str
    sampling: Sampling
    stream: bool
    priority: int = 0  # higher is admitted first, as SGLang under --enable-priority-scheduling


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
    for name, (neutral, why) in UNSUPPORTED_FIELDS.items():
        if name in body and not neutral(body[name]):
            raise InvalidRequest(f"request field {name!r} is not supported by Parley's CPU engine ({why})")
    rid = body.get("rid")
    if rid is None:
        rid = uuid.uuid4().hex
    elif not isinstance(rid, str) or not rid:
        raise InvalidRequest("`rid` must be a non-empty string.")
    priority = body.get("priority")
    if priority is None:
        priority = 0
    elif type(priority) is not int:
        raise InvalidRequest("`priority` must be an integer.")
    return GenerateInput(
        rid=rid, text=text, sampling=parse_sampling(body.get("sampling_params")),
        stream=bool(body.get("stream", False)), priority=priority,
    )


def unsupported_message(name: str) -> str:
    return f"sampling param {name!r} is not supported by Parley's CPU engine ({UNSUPPORTED[name][1]})"


def parse_sampling(raw: Any) -> Sampling:
    """SGLang's ``SamplingParams.__post_init__`` and ``verify()``: ``null`` means the default, and the
    range checks say what SGLang says, in the same order. Params outside ``IMPLEMENTED`` pass only at
    their neutral value."""
    if raw is None:
        return Sampling()
    if not isinstance(raw, dict):
        raise InvalidRequest("`sampling_params` must be a JSON object.")
    unknown = sorted(set(raw) - SGLANG_SAMPLING_KEYS)
    if unknown:
        raise InvalidRequest(f"Unknown sampling parameter(s): {', '.join(unknown)}.")
    for name, (neutral, _why) in UNSUPPORTED.items():
        if name in raw and not neutral(raw[name]):
            raise InvalidRequest(unsupported_message(name))

    max_new = _integer(raw, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    temperature = _number(raw, "temperature", 1.0)
    top_p = _number(raw, "top_p", 1.0)
    top_k = _integer(raw, "top_k", -1)
    min_p = _number(raw, "min_p", 0.0)
    frequency_penalty = _number(raw, "frequency_penalty", 0.0)
    presence_penalty = _number(raw, "presence_penalty", 0.0)
    repetition_penalty = _number(raw, "repetition_penalty", 1.0)
    min_new_tokens = _integer(raw, "min_new_tokens", 0)
    # The same checks, in the same words and order, as SGLang's SamplingParams.verify().
    if not math.isfinite(temperature) or temperature < 0.0:
        raise InvalidRequest(f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise InvalidRequest(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise InvalidRequest(f"min_p must be in [0, 1], got {min_p}.")
    if top_k < 1 and top_k != -1:
        raise InvalidRequest(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    if not -2.0 <= frequency_penalty <= 2.0:
        raise InvalidRequest(f"frequency_penalty must be in [-2, 2], got {frequency_penalty}.")
    if not -2.0 <= presence_penalty <= 2.0:
        raise InvalidRequest(f"presence_penalty must be in [-2, 2], got {presence_penalty}.")
    if not 0.0 < repetition_penalty <= 2.0:
        raise InvalidRequest(f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}.")
    if not 0 <= min_new_tokens:
        raise InvalidRequest(f"min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.")
    if max_new < 0:
        raise InvalidRequest(f"max_new_tokens must be at least 0, got {max_new}.")
    if not min_new_tokens <= max_new:
        raise InvalidRequest(f"min_new_tokens must be in [0, max_new_tokens({max_new})], got {min_new_tokens}.")

    grammars = [Grammar(kind, raw[kind]) for kind in GRAMMAR_KINDS if raw.get(kind) is not None]
    if len(grammars) > 1:
        if any(g.kind == "structural_tag" for g in grammars):  # SGLang would take the other and drop the tag
            raise InvalidRequest("structural_tag cannot be set together with regex, json_schema or ebnf.")
        raise InvalidRequest("Only one of regex, json_schema, or ebnf can be set.")  # SGLang's words
    for g in grammars:
        if not isinstance(g.text, str):
            raise InvalidRequest(f"sampling param {g.kind!r} must be a string, got {type(g.text).__name__}.")

    stop_raw = raw.get("stop") or ()
    stop = (stop_raw,) if isinstance(stop_raw, str) else tuple(stop_raw)
    if not all(isinstance(s, str) for s in stop):
        raise InvalidRequest("`stop` must be a string or a list of strings.")
    return Sampling(
        max_new_tokens=max_new,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        stop=tuple(s for s in stop if s),
        stop_token_ids=_token_ids(raw.get("stop_token_ids")),
        ignore_eos=_flag(raw, "ignore_eos", False),
        no_stop_trim=_flag(raw, "no_stop_trim", False),
        skip_special_tokens=_flag(raw, "skip_special_tokens", True),
        spaces_between_special_tokens=_flag(raw, "spaces_between_special_tokens", True),
        repetition_penalty=repetition_penalty,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        min_new_tokens=min_new_tokens,
        logit_bias=_logit_bias(raw.get("logit_bias")),
        seed=_seed(raw.get("sampling_seed")),
        grammar=grammars[0] if grammars else None,
    )


def check_logit_bias(sampling: Sampling, vocab_size: int) -> None:
    """The vocabulary check of SGLang's verify(), word for word (its grammar included)."""
    for token_id, _ in sampling.logit_bias:
        if not 0 <= token_id < vocab_size:
            raise InvalidRequest(f"logit_bias must has keys in [0, {vocab_size - 1}], got {token_id}.")


def _number(raw: dict[str, Any], key: str, default: float) -> float:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"sampling param {key!r} must be a number, got {value!r}.")
    return float(value)


def _integer(raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"sampling param {key!r} must be an integer, got {value!r}.")
    return value


def _flag(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"sampling param {key!r} must be true or false, got {value!r}.")
    return value


def _token_ids(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value if i is not None):
        raise InvalidRequest(f"sampling param 'stop_token_ids' must be a list of token ids, got {value!r}.")
    return frozenset(i for i in value if i is not None)  # SGLang drops nulls


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise InvalidRequest(f"sampling param 'logit_bias' must be an object of token id to bias, got {value!r}.")
    out: list[tuple[int, float]] = []
    for key, bias in value.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            raise InvalidRequest(f"logit_bias keys must be token ids, got {key!r}.") from None
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
            raise InvalidRequest(f"logit_bias values must be finite numbers, got {bias!r} for token {token_id}.")
        out.append((token_id, float(bias)))
    return tuple(sorted(out))


def _seed(value: Any) -> int | None:
    # SGLang makes an int64 tensor of the seeds; it has no check of its own.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise InvalidRequest(f"sampling_seed must be a 64-bit integer, got {value!r}.")
    return value


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
    """What engine steps added to one request since its previous ``Progress``: deltas, so a reply of n
    tokens costs O(n) to report in all; the HTTP layer accumulates them when it streams cumulatively."""

    text: str  # detokenized text added (never a held-back partial character or stop-string start)
    output_ids: tuple[int, ...]  # generated token ids added
    completion_tokens: int  # generated so far, in all
    prompt_tokens: int
    cached_tokens: int
    finish_reason: dict[str, Any] | None = None


def joined(steps: Iterable[Progress]) -> Progress:
    """A request's steps as one: their text and ids together, the last one's counts and ending."""
    steps = list(steps)
    return replace(steps[-1], text="".join(p.text for p in steps), output_ids=tuple(i for p in steps for i in p.output_ids))


def output(
    rid: str, text: str, output_ids: Sequence[int], p: Progress, e2e_latency: float | None = None
) -> dict[str, Any]:
    """One output object as SGLang's ``/generate`` sends it: ``text`` and ``output_ids`` are the whole
    reply so far (SGLang's default) or, under ``--incremental-streaming-output``, what this event adds;
    ``meta_info``'s counts are totals either way."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": p.finish_reason,
        "prompt_tokens": p.prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": p.completion_tokens,
        "cached_tokens": p.cached_tokens,
    }
    if p.finish_reason is not None and e2e_latency is not None:
        meta["e2e_latency"] = e2e_latency
    return {"text": text, "output_ids": list(output_ids), "meta_info": meta}


def error_body(message: str) -> dict[str, Any]:
    """The body of SGLang's 400 answers and of its in-stream error event."""
    return {"error": {"message": message}}
