"""The permission broker's rules: which server-side tool calls run, which ask the user, which never run (pure).

The model proposes a call (a tool's name and its arguments); it never decides
whether the call runs. ``decide`` does, from the operator's rules, the
organisation's rules and the conversation's mode, in this order (the first
step that answers wins):

1. A tool nobody registered: **deny** (``unknown-tool``).
2. Arguments that are not a JSON object valid against the tool's JSON Schema:
   **deny** (``invalid-arguments``). Rules only ever see well-formed arguments.
3. Any matching ``deny`` rule, the operator's or the organisation's: **deny**,
   naming it. Deny beats every mode.
4. Any matching ``ask`` rule: **ask**, naming it.
5. An ``allow`` rule that names the tool but whose argument matchers do not
   all match (the arguments are outside what it allows), in either layer,
   with no allow rule of that layer matching: **ask**, naming it, in every
   mode, ``allow-all`` included.
6. Mode ``ask``: **ask** (``mode:ask``).
7. A matching ``allow`` rule of the operator: **allow**, naming it.
8. A tool the operator declared read-only, or mode ``allow-all``: **allow**.
9. Otherwise: **ask** (``no-rule``).

The organisation tightens, never loosens: its rules can deny (3), ask (4) or
scope (5), but only the operator's allow rules and declarations allow (7, 8).
A rule matches a call when its tool matcher matches the name and each of its
argument matchers matches the value at its path (dotted, into the arguments
object; a missing path never matches). Where the path holds a list, a deny or
ask rule matches when any element does, an allow rule only when every element
does: a list cannot smuggle one outside value past an allow rule. Numbers and
booleans are matched as their JSON text.

Matchers: ``exact``, ``prefix``, ``glob`` (``fnmatch``, case-sensitive) and
``regex`` (a full match). Regular expressions are the operator's only: an
organisation admin is less trusted than the operator's configuration, and a
pathological pattern would stall the broker for everyone.
"""

from __future__ import annotations

import enum
import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

#: Bounds on what a rule may hold (rules come from files and the admin API).
PATTERN_CHARS = 500
RULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
#: How deep a call's arguments may nest before they are refused (schemas, rules and lists are walked recursively).
ARGUMENTS_DEPTH = 64
ARGUMENT_PATH = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}")


class Effect(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Mode(enum.Enum):
    """How a conversation treats calls no rule decides: ask for each, the rules, or allow what no rule asks."""

    ASK = "ask"
    RULES = "rules"
    ALLOW_ALL = "allow-all"


class Layer(enum.Enum):
    OPERATOR = "operator"
    ORG = "org"


class RuleError(ValueError):
    """A rule that cannot be used: named in the message, its patterns never echoed beyond their kind."""


@dataclass(frozen=True)
class Matcher:
    kind: str  # exact | prefix | glob | regex
    pattern: str
    _compiled: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def matches(self, value: str) -> bool:
        if self.kind == "exact":
            return value == self.pattern
        if self.kind == "prefix":
            return value.startswith(self.pattern)
        if self.kind == "glob":
            return fnmatch.fnmatchcase(value, self.pattern)
        assert self._compiled is not None
        return self._compiled.fullmatch(value) is not None


@dataclass(frozen=True)
class Rule:
    name: str
    effect: Effect
    tool: Matcher
    arguments: tuple[tuple[str, Matcher], ...] = ()

    def names(self, tool: str) -> bool:
        return self.tool.matches(tool)

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        """Every argument matcher matches (for an allow rule: every element of a list; otherwise: any)."""
        every = self.effect is Effect.ALLOW
        for path, matcher in self.arguments:
            found, value = _at(arguments, path)
            if not found:
                return False
            hits = [matcher.matches(_text(v)) for v in _leaves(value)]
            if not hits or not (all(hits) if every else any(hits)):
                return False
        return True


@dataclass(frozen=True)
class Tool:
    """A tool the operator registered: its name, its arguments' JSON Schema, and whether it only reads."""

    name: str
    parameters: Mapping[str, Any]
    read_only: bool = False


@dataclass(frozen=True)
class Decision:
    effect: Effect
    rule: str  # which rule or step decided: "operator:name", "org:name", "unknown-tool", "mode:ask", …
    reason: str = ""  # for the user and the model; never an argument's value


def decide(
    tool: Tool | None,
    name: str,
    arguments: str,
    *,
    operator: Sequence[Rule],
    org: Sequence[Rule] = (),
    mode: Mode = Mode.RULES,
) -> Decision:
    """The broker's decision on one proposed call (the order in the module's docstring)."""
    if tool is None:
        return Decision(Effect.DENY, "unknown-tool", "no tool of that name is registered")
    parsed, problem = _parsed(tool, arguments)
    if parsed is None:
        return Decision(Effect.DENY, "invalid-arguments", problem)
    layers = ((Layer.OPERATOR, operator), (Layer.ORG, org))
    for effect in (Effect.DENY, Effect.ASK):
        for layer, rules in layers:
            for rule in rules:
                if rule.effect is effect and rule.names(name) and rule.holds(parsed):
                    return Decision(effect, f"{layer.value}:{rule.name}", f"a rule says {effect.value}")
    allowed_by: dict[Layer, Rule | None] = {}
    for layer, rules in layers:
        scoped = [r for r in rules if r.effect is Effect.ALLOW and r.names(name)]
        allowed_by[layer] = next((r for r in scoped if r.holds(parsed)), None)
        if scoped and allowed_by[layer] is None:
            return Decision(
                Effect.ASK, f"{layer.value}:{scoped[0].name}", "the arguments are outside what the allow rule permits"
            )
    if mode is Mode.ASK:
        return Decision(Effect.ASK, "mode:ask", "this conversation asks before every call")
    if (rule := allowed_by[Layer.OPERATOR]) is not None:
        return Decision(Effect.ALLOW, f"operator:{rule.name}", "")
    if tool.read_only:
        return Decision(Effect.ALLOW, "read-only", "")
    if mode is Mode.ALLOW_ALL:
        return Decision(Effect.ALLOW, "mode:allow-all", "")
    return Decision(Effect.ASK, "no-rule", "no rule allows this tool")


def rules_from(entries: Any, layer: Layer) -> tuple[Rule, ...]:
    """Rules from their JSON/YAML form (a list of ``{name, effect, tool, arguments}``); RuleError names the bad one.

    ``tool`` and each argument's matcher are a string (exact) or a one-key
    mapping ``{exact|prefix|glob|regex: pattern}``.
    """
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise RuleError("rules must be a list")
    rules: list[Rule] = []
    for position, entry in enumerate(entries):
        where = f"rule {position + 1}"
        if not isinstance(entry, dict):
            raise RuleError(f"{where} must be a mapping")
        unknown = set(entry) - {"name", "effect", "tool", "arguments"}
        if unknown:
            raise RuleError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        rule_name = entry.get("name")
        if not isinstance(rule_name, str) or not RULE_NAME.fullmatch(rule_name):
            raise RuleError(f"{where}: `name` must be 1-64 letters, digits, '_', '.', ':' or '-'")
        where = f"rule {rule_name!r}"
        try:
            effect = Effect(entry.get("effect"))
        except ValueError:
            raise RuleError(f"{where}: `effect` must be allow, ask or deny") from None
        arguments = entry.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise RuleError(f"{where}: `arguments` must map argument paths to matchers")
        for path in arguments:
            if not isinstance(path, str) or not ARGUMENT_PATH.fullmatch(path):
                raise RuleError(f"{where}: argument paths are dotted names (letters, digits, '_', '-')")
        rules.append(Rule(
            rule_name,
            effect,
            _matcher(entry.get("tool"), layer, f"{where} `tool`"),
            tuple((path, _matcher(m, layer, f"{where} argument {path!r}")) for path, m in arguments.items()),
        ))
    if len({r.name for r in rules}) != len(rules):
        raise RuleError("rule names must be unique")
    return tuple(rules)


def _matcher(spec: Any, layer: Layer, where: str) -> Matcher:
    if isinstance(spec, str):
        spec = {"exact": spec}
    if not isinstance(spec, dict) or len(spec) != 1:
        raise RuleError(f"{where} must be a string or one of exact, prefix, glob, regex")
    ((kind, pattern),) = spec.items()
    if kind not in ("exact", "prefix", "glob", "regex"):
        raise RuleError(f"{where}: unknown matcher {kind!r} (exact, prefix, glob, regex)")
    if not isinstance(pattern, str) or not 0 < len(pattern) <= PATTERN_CHARS:
        raise RuleError(f"{where}: the pattern must be a string of 1 to {PATTERN_CHARS} characters")
    if kind != "regex":
        return Matcher(kind, pattern)
    if layer is not Layer.OPERATOR:
        raise RuleError(f"{where}: regular expressions are for the operator's rules only")
    try:
        return Matcher(kind, pattern, re.compile(pattern))
    except re.error as error:
        raise RuleError(f"{where}: not a regular expression ({error.msg})") from None


def _parsed(tool: Tool, arguments: str) -> tuple[dict[str, Any] | None, str]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return None, "the arguments are not JSON"
    if not isinstance(value, dict):
        return None, "the arguments are not a JSON object"
    if _depth(value) > ARGUMENTS_DEPTH:
        return None, f"the arguments nest deeper than {ARGUMENTS_DEPTH} levels"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(tool.parameters).iter_errors(value))
    if error is not None:
        place = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        return None, f"the arguments do not match the tool's schema at {place} ({error.validator})"
    return value, ""


def _depth(value: Any) -> int:
    """How deep ``value`` nests, counted without recursion (a hostile value may nest to the parser's limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


def _at(arguments: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    value: Any = arguments
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _leaves(value: Any) -> list[Any]:
    """A value's scalars and objects, lists flattened at every depth: ``[["/etc/passwd"]]`` is matched as its path."""
    if not isinstance(value, list):
        return [value]
    return [leaf for item in value for leaf in _leaves(item)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
