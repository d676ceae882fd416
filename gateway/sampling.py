"""A turn's sampling parameters, read from a request body once for both APIs (pure).

The native API takes them as a ``sampling`` object beside the message; the
OpenAI endpoint takes OpenAI's top-level fields (``temperature``, ``top_p``,
``seed``, ``stop``, ``presence_penalty``, ``frequency_penalty``,
``response_format``) and the extensions SGLang's and vLLM's OpenAI servers
take beside them, which serving benchmarks send (``top_k``, ``min_p``,
``repetition_penalty``, ``ignore_eos``, ``stop_token_ids``, ``min_tokens``; the
openai SDK sends them through ``extra_body``). Either way they become one
``schemas.events.Sampling`` that travels with the turn to the engine. Every
value is checked here, with OpenAI's ranges and SGLang's for its extensions,
and a bad one is refused naming its field: the engine would otherwise fail the
turn after it was appended.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from schemas.events import Sampling

#: Fields of ``Sampling`` a request may set, with their inclusive ranges (those in ``ABOVE_LOW`` exclude their low end).
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "min_p": (0.0, 1.0),
    "repetition_penalty": (0.0, 2.0),  # SGLang's: 1 is none, above 1 discourages repeats
}
ABOVE_LOW = frozenset({"top_p", "repetition_penalty"})
#: Seeds are Avro longs.
SEED_MAX = 2**63 - 1
STOP_MAX = 4
STOP_CHARS = 200
SCHEMA_CHARS = 32_000
#: top_k past any vocabulary; -1 and 0 mean no cut (SGLang's -1, vLLM's 0 and -1), as if unset.
TOP_K_MAX = 1_000_000
#: Token ids: at most this many, each below this (past any vocabulary).
STOP_TOKEN_IDS_MAX = 64
TOKEN_ID_MAX = 2**31 - 1
#: min_tokens at most: the largest token cap a request may set (``gateway/openai_request.py MAX_TOKENS``).
MIN_TOKENS_MAX = 1_000_000
#: Every field a request may send, by its name in both APIs.
FIELDS = frozenset({*RANGES, "seed", "stop", "top_k", "ignore_eos", "stop_token_ids", "min_tokens"})

Refuse = Callable[[str, str], Exception]  # (message, field) → the error to raise


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_sampling(fields: Mapping[str, Any], refuse: Refuse, *, prefix: str = "") -> Sampling:
    """The ``Sampling`` ``fields`` ask for (absent or null: the pool's default); ``refuse`` makes the error."""
    values: dict[str, Any] = {}
    for name, (low, high) in RANGES.items():
        value = fields.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise refuse(f"`{prefix}{name}` must be a number from {low:g} to {high:g}", prefix + name)
        if name in ABOVE_LOW and value == low:
            raise refuse(f"`{prefix}{name}` must be above {low:g}", prefix + name)
        values[name] = float(value)
    seed = fields.get("seed")
    if seed is not None:
        if not _integer(seed) or not 0 <= seed <= SEED_MAX:
            raise refuse(f"`{prefix}seed` must be an integer from 0 to {SEED_MAX}", prefix + "seed")
        values["seed"] = seed
    stop = fields.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if (
            not isinstance(stops, list)
            or len(stops) > STOP_MAX
            or not all(isinstance(s, str) and 0 < len(s) <= STOP_CHARS for s in stops)
        ):
            raise refuse(
                f"`{prefix}stop` must be a string or a list of at most {STOP_MAX} non-empty strings of up to "
                f"{STOP_CHARS} characters",
                prefix + "stop",
            )
        values["stop"] = list(stops)
    top_k = fields.get("top_k")
    if top_k is not None:
        if not _integer(top_k) or not -1 <= top_k <= TOP_K_MAX:
            raise refuse(f"`{prefix}top_k` must be an integer from 1 to {TOP_K_MAX}, or -1 or 0 for no cut", prefix + "top_k")
        if top_k > 0:
            values["top_k"] = top_k
    ignore_eos = fields.get("ignore_eos")
    if ignore_eos is not None:
        if not isinstance(ignore_eos, bool):
            raise refuse(f"`{prefix}ignore_eos` must be true or false", prefix + "ignore_eos")
        values["ignore_eos"] = ignore_eos
    ids = fields.get("stop_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or len(ids) > STOP_TOKEN_IDS_MAX or not all(_integer(i) and 0 <= i <= TOKEN_ID_MAX for i in ids):
            raise refuse(
                f"`{prefix}stop_token_ids` must be a list of at most {STOP_TOKEN_IDS_MAX} token ids (integers from 0 to "
                f"{TOKEN_ID_MAX})",
                prefix + "stop_token_ids",
            )
        values["stop_token_ids"] = sorted(set(ids))
    min_tokens = fields.get("min_tokens")
    if min_tokens is not None:
        if not _integer(min_tokens) or not 0 <= min_tokens <= MIN_TOKENS_MAX:
            raise refuse(f"`{prefix}min_tokens` must be an integer from 0 to {MIN_TOKENS_MAX}", prefix + "min_tokens")
        if min_tokens:
            values["min_tokens"] = min_tokens
    return Sampling(**values)


def check_min_tokens(sampling: Sampling, max_tokens: int | None, refuse: Refuse, *, prefix: str = "") -> None:
    """``min_tokens`` no more than the request's own cap (vLLM's rule); without a cap the worker holds it to the
    pool's."""
    if sampling.min_tokens is not None and max_tokens is not None and sampling.min_tokens > max_tokens:
        raise refuse(f"`{prefix}min_tokens` must be at most `max_tokens` ({max_tokens})", prefix + "min_tokens")


def json_schema_of(response_format: Any, refuse: Refuse) -> str | None:
    """OpenAI's ``response_format`` as the JSON Schema SGLang constrains to (None: free text)."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind is not None and "json_schema" in response_format and not isinstance(response_format["json_schema"], dict):
        raise refuse("`response_format.json_schema` must be an object", "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise refuse("`response_format.json_schema.schema` must be a JSON Schema object", "response_format")
        text = json.dumps(schema, separators=(",", ":"))
        if len(text) > SCHEMA_CHARS:
            raise refuse(f"`response_format.json_schema.schema` is over {SCHEMA_CHARS} characters", "response_format")
        return text
    raise refuse("`response_format.type` must be text, json_object or json_schema", "response_format")
