"""A turn's sampling parameters, read from a request body once for both APIs (pure).

The native API takes them as a ``sampling`` object beside the message; the
OpenAI endpoint takes OpenAI's top-level fields (``temperature``, ``top_p``,
``seed``, ``stop``, ``presence_penalty``, ``frequency_penalty``,
``response_format``). Either way they become one ``schemas.events.Sampling``
that travels with the turn to the engine. Every value is checked here, with
OpenAI's ranges, and a bad one is refused naming its field: the engine would
otherwise fail the turn after it was appended.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from schemas.events import Sampling

#: Fields of ``Sampling`` a request may set, with their inclusive ranges.
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}
#: Seeds are Avro longs.
SEED_MAX = 2**63 - 1
STOP_MAX = 4
STOP_CHARS = 200
SCHEMA_CHARS = 32_000

Refuse = Callable[[str, str], Exception]  # (message, field) → the error to raise


def parse_sampling(fields: Mapping[str, Any], refuse: Refuse, *, prefix: str = "") -> Sampling:
    """The ``Sampling`` ``fields`` ask for (absent or null: the pool's default); ``refuse`` makes the error."""
    values: dict[str, Any] = {}
    for name, (low, high) in RANGES.items():
        value = fields.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise refuse(f"`{prefix}{name}` must be a number from {low:g} to {high:g}", prefix + name)
        if name == "top_p" and value == 0:
            raise refuse(f"`{prefix}top_p` must be above 0", prefix + name)
        values[name] = float(value)
    seed = fields.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
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
    return Sampling(**values)


def json_schema_of(response_format: Any, refuse: Refuse) -> str | None:
    """OpenAI's ``response_format`` as the JSON Schema SGLang constrains to (None: free text)."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
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
