"""A model's tool calls, read out of its text and written back into prompts, per model family.

Models call tools by writing markup in their reply; Parley parses it (the
engine returns text) and hands the client OpenAI's ``tool_calls``. Each chat
template family (workers/chat_template.py, named per pool by
``PARLEY_POOL_TEMPLATES``) has one format:

- ``hermes`` (ChatML: SmolLM2, Qwen2.5/Qwen3, Hermes)::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

- ``llama3`` (Llama-3.1/3.2/3.3-Instruct): a bare JSON object, or several
  separated by ``;``, optionally after ``<|python_tag|>``::

      {"name": "get_weather", "parameters": {"city": "Paris"}}

- ``deepseek`` (DeepSeek-V3)::

      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
      ```json
      {"city": "Paris"}
      ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The formats are those SGLang's tool parsers read (python/sglang/srt/function_call/,
Apache-2.0); this is Parley's own, smaller reading of them. Markup that does not
parse whole (bad JSON, no name, a function the request did not offer) is text:
the reply is never lost to a parser, and never crashes one.

A forced tool choice (``required``, or a named function) is not left to the
model: the worker sends the engine ``forced_schema(tools)`` as its
``json_schema``, the one SGLang's OpenAI server sends for the same choice
(``get_json_schema_constraint`` in sglang/srt/function_call/utils.py), and the
constrained reply is a JSON array of calls in every family::

      [{"name": "get_weather", "parameters": {"city": "Paris"}}]

read by ``JSON_CALLS``; each call's ``parameters`` are valid against its
function's schema, whatever the model.

``CallStream`` splits a streaming reply: text before the first call's markup
streams as content; from the markup on, text is held, and parsed when the reply
ends.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from schemas.events import Tools

#: Characters of held markup past which a reply is no longer read as calls (a runaway "call").
MAX_MARKUP_CHARS = 256_000


@dataclass(frozen=True)
class Call:
    """One parsed call: the function's name and its arguments as compact JSON text (an object)."""

    name: str
    arguments: str


def call_id(request_id: str, index: int) -> str:
    """The id OpenAI clients see: the same for a reply's ``index``-th call in every attempt and replay."""
    return "call_" + hashlib.sha256(f"{request_id}:{index}".encode()).hexdigest()[:24]


def _arguments(value: object) -> str | None:
    """Arguments as compact JSON of an object; a JSON string holding one is taken too (some models quote them)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _named(obj: object, argument_keys: Sequence[str]) -> Call | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    raw = next((obj[k] for k in argument_keys if k in obj), {})
    arguments = _arguments(raw)
    return None if arguments is None else Call(obj["name"], arguments)


class Format:
    """One family's tool-call markup."""

    name: str = ""
    #: Strings that open the calls in a reply.
    openers: tuple[str, ...] = ()
    #: What calls may open a reply with, bare (no opener, nothing before it): "{" (Llama-3's JSON), "[" (an array).
    bare_start: str = ""

    def opens_bare(self, text: str) -> bool:
        """Whether a reply whose text so far is ``text`` (nothing shown yet) opens with calls without an opener."""
        return bool(self.bare_start) and text.lstrip().startswith(self.bare_start)

    def parse(self, markup: str) -> list[Call] | None:
        """The calls in ``markup`` (the reply from its first opener on); None when it is not calls."""
        raise NotImplementedError

    def render(self, calls: Sequence[Call]) -> str:
        """``calls`` as the model writes them (an assistant message of the history)."""
        raise NotImplementedError

    def tag(self, name: str) -> tuple[str, str, str]:
        """How one call of ``name`` is written, around its arguments: (trigger, begin, end), as SGLang's
        structural tags take it; the begin starts with the trigger that opens it."""
        raise NotImplementedError


class Hermes(Format):
    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    openers = (OPEN,)
    _BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse(self, markup: str) -> list[Call] | None:
        calls = []
        for body in self._BLOCK.findall(markup):
            try:
                call = _named(json.loads(body), ("arguments", "parameters"))
            except ValueError:
                return None
            if call is None:
                return None
            calls.append(call)
        return calls or None

    def render(self, calls: Sequence[Call]) -> str:
        return "\n".join(
            f'{self.OPEN}\n{{"name": {json.dumps(c.name, ensure_ascii=False)}, "arguments": {c.arguments}}}\n{self.CLOSE}'
            for c in calls
        )

    def tag(self, name: str) -> tuple[str, str, str]:
        return self.OPEN, f'{self.OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": ', f"}}\n{self.CLOSE}"


class Llama3Json(Format):
    name = "llama3"
    TAG = "<|python_tag|>"
    openers = (TAG,)
    bare_start = "{"

    def parse(self, markup: str) -> list[Call] | None:
        text = markup.strip()
        text = text.removeprefix(self.TAG)
        decoder = json.JSONDecoder()
        calls, at = [], 0
        while True:
            while at < len(text) and (text[at].isspace() or text[at] == ";"):
                at += 1
            if at == len(text):
                break
            try:
                obj, at = decoder.raw_decode(text, at)
            except ValueError:
                return None
            call = _named(obj, ("parameters", "arguments"))
            if call is None:
                return None
            calls.append(call)
        return calls or None

    def render(self, calls: Sequence[Call]) -> str:
        return "; ".join(f'{{"name": {json.dumps(c.name, ensure_ascii=False)}, "parameters": {c.arguments}}}' for c in calls)

    def tag(self, name: str) -> tuple[str, str, str]:
        return '{"name": ', f'{{"name": {json.dumps(name, ensure_ascii=False)}, "parameters": ', "}"


class DeepSeekV3(Format):
    name = "deepseek"
    BEGIN, END = "<\uff5ctool\u2581calls\u2581begin\uff5c>", "<\uff5ctool\u2581calls\u2581end\uff5c>"
    CALL, SEP, CALL_END = "<\uff5ctool\u2581call\u2581begin\uff5c>", "<\uff5ctool\u2581sep\uff5c>", "<\uff5ctool\u2581call\u2581end\uff5c>"
    openers = (BEGIN, CALL)
    _CALL = re.compile(
        "<\uff5ctool\u2581call\u2581begin\uff5c>(.*?)<\uff5ctool\u2581sep\uff5c>(.*?)\\s*```(?:json)?\\s*(.*?)\\s*```"
        "\\s*<\uff5ctool\u2581call\u2581end\uff5c>",
        re.DOTALL,
    )

    def parse(self, markup: str) -> list[Call] | None:
        calls = []
        for _kind, name, body in self._CALL.findall(markup):
            arguments = _arguments(body)
            if arguments is None or not name.strip():
                return None
            calls.append(Call(name.strip(), arguments))
        return calls or None

    def render(self, calls: Sequence[Call]) -> str:
        inner = "".join(f"{self.CALL}function{self.SEP}{c.name}\n```json\n{c.arguments}\n```{self.CALL_END}" for c in calls)
        return f"{self.BEGIN}{inner}{self.END}"

    def tag(self, name: str) -> tuple[str, str, str]:
        return self.CALL, f"{self.CALL}function{self.SEP}{name}\n```json\n", f"\n```{self.CALL_END}"


class JsonCalls(Format):
    """A forced tool choice's reply, whatever the family: the JSON array ``forced_schema`` constrains it to."""

    name = "json_calls"
    bare_start = "["

    def parse(self, markup: str) -> list[Call] | None:
        try:
            value = json.loads(markup)
        except ValueError:
            return None
        calls = [_named(item, ("parameters",)) for item in value] if isinstance(value, list) else []
        return None if not calls or None in calls else calls  # type: ignore[return-value]

    def render(self, calls: Sequence[Call]) -> str:
        return json.dumps([{"name": c.name, "parameters": json.loads(c.arguments)} for c in calls], ensure_ascii=False)


HERMES, LLAMA3_JSON, DEEPSEEK_V3, JSON_CALLS = Hermes(), Llama3Json(), DeepSeekV3(), JsonCalls()
FORMATS: dict[str, Format] = {f.name: f for f in (HERMES, LLAMA3_JSON, DEEPSEEK_V3)}
#: Where a schema keeps the definitions its ``$ref``s point to (2020-12's, draft-07's).
_DEFINITIONS = ("$defs", "definitions")


def forced_schema(tools: Tools) -> str | None:
    """The JSON Schema a forced tool choice constrains the reply to, as SGLang builds it for its own OpenAI server:
    an array of at least one ``{"name", "parameters"}`` (at most one when ``parallel`` is off), each naming an
    offered function (the named one only) with parameters valid against its schema. None when the model chooses.

    Each function's ``$defs`` (and ``definitions``) move to the array's root, where its ``#/$defs/…`` references
    now resolve; two functions defining one name differently raise ValueError (the gateway refuses the request)."""
    if tools.choice not in ("required", "function") or not tools.functions:
        return None
    items: list[dict[str, Any]] = []
    hoisted: dict[str, dict[str, Any]] = {}
    for f in tools.functions:
        if tools.choice == "function" and f.name != tools.function:
            continue
        parameters = json.loads(f.parameters) if f.parameters else {"type": "object", "properties": {}}
        for key in _DEFINITIONS:
            if isinstance(parameters, dict) and isinstance(parameters.get(key), dict):
                for name, definition in parameters.pop(key).items():
                    if hoisted.setdefault(key, {}).setdefault(name, definition) != definition:
                        raise ValueError(f"two functions define {key} {name!r} differently")
        items.append({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [f.name]}, "parameters": parameters},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        })  # fmt: skip
    if not items:
        raise ValueError(f"tool_choice names {tools.function!r}, which is not among the functions")
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": items[0] if len(items) == 1 else {"anyOf": items}}
    if not tools.parallel:
        schema["maxItems"] = 1
    schema.update(hoisted)
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def structural_tag(tools: Tools, fmt: Format) -> str | None:
    """With ``tool_choice`` auto and a function marked ``strict``: SGLang's ``structural_tag`` for the family's
    markup (what its OpenAI server sends for strict tools), so the model writes free text, and any call it opens
    is constrained from its trigger on: a strict function's arguments to its schema, another's to an object.
    None when nothing is strict, or when a forced choice constrains the whole reply instead (``forced_schema``)."""
    if tools.choice != "auto" or not any(f.strict for f in tools.functions):
        return None
    structures, triggers = [], []
    for f in tools.functions:
        trigger, begin, end = fmt.tag(f.name)
        schema = json.loads(f.parameters) if f.strict and f.parameters else {"type": "object"}
        structures.append({"begin": begin, "schema": schema, "end": end})
        if trigger not in triggers:
            triggers.append(trigger)
    tag = {"type": "structural_tag", "structures": structures, "triggers": triggers}
    return json.dumps(tag, ensure_ascii=False, separators=(",", ":"))


def offered(calls: Iterable[Call], names: Iterable[str], parallel: bool = True) -> list[Call] | None:
    """``calls`` if each names an offered function (else None: the markup is text), the first only when
    the request asked for no parallel calls."""
    known = set(names)
    out = list(calls)
    if not out or any(c.name not in known for c in out):
        return None
    return out if parallel else out[:1]


class CallStream:
    """A reply's text split, as it streams, into content and tool-call markup.

    ``feed`` returns the content that may be shown now; text that may begin an opener is held until it is
    known not to. ``finish`` returns the rest of the content and the calls: markup that does not parse, or
    names a function not in ``names``, comes back as content.
    """

    def __init__(self, fmt: Format, names: Iterable[str], *, parallel: bool = True) -> None:
        self._fmt = fmt
        self._names = tuple(names)
        self._parallel = parallel
        self._pending = ""  # content held while it may be the start of an opener
        self._markup: str | None = None  # from the first opener on
        self._shown = False  # some content went out (a bare-JSON opener counts only at the reply's start)

    def feed(self, text: str) -> str:
        if self._markup is not None:
            self._markup += text
            return ""
        text = self._pending + text
        self._pending = ""
        if not self._shown and self._fmt.opens_bare(text):
            self._markup = text
            return ""
        if not self._shown and not text.strip() and self._fmt.bare_start:
            self._pending = text  # leading whitespace: a bare call may still follow
            return ""
        at = min((i for i in (text.find(o) for o in self._fmt.openers) if i >= 0), default=-1)
        if at >= 0:
            self._markup = text[at:]
            return self._show(text[:at])
        keep = _partial_opener(text, self._fmt.openers)
        self._pending = text[len(text) - keep:] if keep else ""
        return self._show(text[: len(text) - keep])

    def finish(self) -> tuple[str, list[Call]]:
        """(content not yet shown, the calls)."""
        markup, self._markup = self._markup, None
        tail, self._pending = self._pending, ""
        if markup is None:
            return tail, []
        parsed = self._fmt.parse(markup) if len(markup) <= MAX_MARKUP_CHARS else None
        calls = offered(parsed or (), self._names, self._parallel)
        return ("", calls) if calls else (tail + markup, [])

    def _show(self, text: str) -> str:
        self._shown = self._shown or bool(text)
        return text


def _partial_opener(text: str, openers: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that is the beginning of an opener."""
    best = 0
    for opener in openers:
        for n in range(min(len(opener) - 1, len(text)), best, -1):
            if text.endswith(opener[:n]):
                best = n
                break
    return best
