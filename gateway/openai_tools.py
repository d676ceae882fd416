"""OpenAI's function calling, read and checked: ``tools``, ``tool_choice``, ``parallel_tool_calls`` and the
``tool_calls`` of a history's assistant messages (pure).

Client-side tools: Parley returns the model's calls and the client runs them
(gateway/openai_compat.py). Every bound here is checked before anything is
appended; a value Parley cannot honour is a 400 naming its ``param``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator, SchemaError

from schemas.events import ToolCall, ToolFunction, Tools
from workers.tool_calls import forced_schema

#: OpenAI's limits: 128 functions, names of 64 letters, digits, _ and -.
MAX_TOOLS = 128
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DESCRIPTION_CHARS = 8_192
#: A function's parameters schema, as compact JSON; and how deep it may nest (deeper is no schema a client means).
SCHEMA_CHARS = 32_768
SCHEMA_DEPTH = 32
#: Calls in one assistant message of a history; characters of one call's id and of its arguments.
MAX_CALLS = 128
ID_CHARS = 200
ARGUMENTS_CHARS = 65_536
CHOICES = ("auto", "none", "required")

Refuse = Callable[..., Exception]  # (message, param, code=…) → the 400 to raise


def _depth(value: Any) -> int:
    """How deep ``value`` nests (iteratively: a hostile schema must not exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > SCHEMA_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _function(value: Any, i: int, refuse: Refuse) -> ToolFunction:
    param = f"tools[{i}]"
    if not isinstance(value, dict):
        raise refuse(f"`{param}` must be an object", param, code="invalid_type")
    kind = value.get("type")
    if kind != "function":
        raise refuse(
            f"`{param}.type` {kind!r} is not supported: Parley offers the model only the client's functions "
            '(`"type": "function"`)',
            f"{param}.type",
            code="unsupported_parameter",
        )
    function = value.get("function")
    if not isinstance(function, dict):
        raise refuse(f"`{param}.function` must be an object", f"{param}.function", code="invalid_type")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise refuse(f"`{param}.function.name` must be 1 to 64 letters, digits, _ or -", f"{param}.function.name")
    description = function.get("description")
    description = "" if description is None else description
    if not isinstance(description, str) or len(description) > DESCRIPTION_CHARS or "\x00" in description:
        raise refuse(f"`{param}.function.description` must be text of at most {DESCRIPTION_CHARS} characters", f"{param}.function.description")
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise refuse(f"`{param}.function.strict` must be a boolean", f"{param}.function.strict", code="invalid_type")
    extra = set(function) - {"name", "description", "parameters", "strict"}
    if extra:
        raise refuse(f"`{param}.function.{sorted(extra)[0]}` is not a field Parley takes", f"{param}.function", code="unsupported_parameter")
    parameters = _schema(function.get("parameters"), f"{param}.function.parameters", refuse)
    return ToolFunction(name=name, description=description, parameters=parameters, strict=bool(strict))


def _schema(value: Any, param: str, refuse: Refuse) -> str:
    if value is None:
        return ""
    if not isinstance(value, dict):
        raise refuse(f"`{param}` must be a JSON Schema object", param, code="invalid_type")
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if len(text) > SCHEMA_CHARS:
        raise refuse(f"`{param}` is over {SCHEMA_CHARS} characters", param)
    if _depth(value) > SCHEMA_DEPTH:
        raise refuse(f"`{param}` nests deeper than {SCHEMA_DEPTH} levels", param)
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise refuse(f"`{param}` is not a valid JSON Schema: {exc.message[:200]}", param) from None
    return text


def parse_tools(body: Mapping[str, Any], refuse: Refuse) -> Tools | None:
    """The request's tools and tool choice; None when it offers none (``tools`` absent or empty)."""
    raw = body.get("tools")
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise refuse("`parallel_tool_calls` must be a boolean", "parallel_tool_calls", code="invalid_type")
    if raw is not None and not isinstance(raw, list):
        raise refuse("`tools` must be a list of functions", "tools", code="invalid_type")
    if len(raw or ()) > MAX_TOOLS:
        raise refuse(f"`tools` lists more than {MAX_TOOLS} functions", "tools")
    functions = [_function(t, i, refuse) for i, t in enumerate(raw or ())]
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise refuse("`tools` names a function twice", "tools")
    named = ""
    if isinstance(choice, dict):
        function = choice.get("function")
        named = function.get("name") if choice.get("type") == "function" and isinstance(function, dict) else None
        if not isinstance(named, str):
            raise refuse('`tool_choice` must be auto, none, required or {"type": "function", "function": {"name": …}}', "tool_choice")
        if named not in names:
            raise refuse("`tool_choice` names a function that is not in `tools`", "tool_choice")
        choice = "function"
    elif choice is not None and choice not in CHOICES:
        raise refuse('`tool_choice` must be auto, none, required or {"type": "function", "function": {"name": …}}', "tool_choice")
    if not functions:
        if choice not in (None, "auto", "none"):
            raise refuse("`tool_choice` asks for a tool call but `tools` lists none", "tool_choice")
        return None
    tools = Tools(functions=functions, choice=choice or "auto", function=named, parallel=parallel is not False)
    try:
        forced_schema(tools)  # a forced choice's constraint: one schema of every function it may call
    except ValueError as exc:
        raise refuse(f"`tools` cannot be forced together: {exc}", "tools") from None
    return tools


def parse_tool_calls(value: Any, param: str, refuse: Refuse) -> tuple[ToolCall, ...]:
    """An assistant message's ``tool_calls`` as the client sends back what it got."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_CALLS:
        raise refuse(f"`{param}` must be a list of at most {MAX_CALLS} calls", param, code="invalid_type")
    out = []
    for i, call in enumerate(value):
        at = f"{param}[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or call.get("type", "function") != "function" or not isinstance(function, dict):
            raise refuse(f'`{at}` must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}', at)
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= ID_CHARS or not call_id.isprintable():
            raise refuse(f"`{at}.id` must be 1 to {ID_CHARS} printable characters", f"{at}.id")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise refuse(f"`{at}.function.name` must be 1 to 64 letters, digits, _ or -", f"{at}.function.name")
        if not isinstance(arguments, str) or len(arguments) > ARGUMENTS_CHARS or "\x00" in arguments:
            raise refuse(f"`{at}.function.arguments` must be JSON text of at most {ARGUMENTS_CHARS} characters", f"{at}.function.arguments")
        out.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return tuple(out)


def tool_call_id(value: Any, param: str, refuse: Refuse) -> str:
    """A tool message's ``tool_call_id``."""
    if not isinstance(value, str) or not 0 < len(value) <= ID_CHARS or not value.isprintable():
        raise refuse(f"`{param}` must be the id of the call answered (1 to {ID_CHARS} printable characters)", param)
    return value


def same_calls(a: tuple[ToolCall, ...], b: tuple[ToolCall, ...]) -> bool:
    """Whether two messages make the same calls (arguments compared as JSON: a client may re-serialise them)."""
    return len(a) == len(b) and all(x.id == y.id and x.name == y.name and _loaded(x.arguments) == _loaded(y.arguments) for x, y in zip(a, b))


def _loaded(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
