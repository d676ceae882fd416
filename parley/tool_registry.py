"""The tools Parley itself may run, and the operator's rules for them (DESIGN.md §13).

One JSON file, ``PARLEY_TOOLS_FILE``, read by the gateway (what a turn may offer the model), the
permission broker (the rules) and the executor (how to run each tool); every process reads the same file,
so they agree. Without the file only the built-in ``fetch_url`` exists, under the default mode; the other
built-ins (``search_documents``, ``remember``, ``forget``: they read or change the user's own data) only when
the file names them in ``builtins``::

    {
      "mode": "rules",                      # rules | ask | allow-all (streams/tool_policy.py)
      "rules": [{"name": "...", "effect": "allow", "tool": {"exact": "..."}, "arguments": {...}}],
      "tools": [{"name": "add_expense", "description": "...", "parameters": {...JSON Schema...},
                 "kind": "http", "url": "https://...", "read_only": false, "idempotent": true},
                {"name": "search_wiki", "kind": "mcp", "url": "https://mcp.example/mcp", "remote": "search",
                 "parameters": {...}, "read_only": true}],
      "fetch": {"allow_networks": ["127.0.0.0/8"]},   # SSRF guard exceptions (none by default)
      "builtins": ["search_documents", "remember", "forget"],   # Parley's own tools beyond fetch_url
      "max_rounds": 4, "approval_timeout_s": 600
    }

A tool's ``read_only`` and ``idempotent`` are the operator's word, never the tool's: an MCP server's
annotations are hints (the MCP spec says so). ``idempotent`` means the tool honours the call id sent as its
idempotency key, so a call repeated with the same id takes effect once.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parley.errors import ConfigError
from parley.settings import env

#: http: POST url with the arguments; mcp: a tool of an MCP server at url (streamable HTTP); the built-ins:
#: fetch (a URL's text), documents (the caller's documents searched), memory (the caller's memory changed).
TOOL_KINDS = frozenset({"http", "mcp", "fetch", "documents", "memory"})
#: Kinds whose runner acts on the calling user's own data: it is handed the call's user id.
USER_KINDS = frozenset({"documents", "memory"})
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MODES = frozenset({"rules", "ask", "allow-all"})

#: The built-in URL reader: read-only, so allowed unless a rule says otherwise; private networks refused.
FETCH_URL = "fetch_url"
_FETCH_PARAMETERS = {
    "type": "object",
    "properties": {"url": {"type": "string", "maxLength": 2048, "description": "An http or https URL"}},
    "required": ["url"],
    "additionalProperties": False,
}


#: The caller's own documents, searched as a turn's attached ones are: read-only, so allowed by default.
SEARCH_DOCUMENTS = "search_documents"
_SEARCH_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500, "description": "What to look for"}},
    "required": ["query"],
    "additionalProperties": False,
}
#: The caller's memory (facts rendered into every prompt): changes, so the user is asked first by default.
REMEMBER, FORGET = "remember", "forget"
_FACT_PARAMETERS = {
    "type": "object",
    "properties": {"fact": {"type": "string", "minLength": 1, "maxLength": 500, "description": "One short fact about the user"}},
    "required": ["fact"],
    "additionalProperties": False,
}
#: The built-ins a tools file may add (``builtins``); fetch_url is always there.
OPTIONAL_BUILTINS = (SEARCH_DOCUMENTS, REMEMBER, FORGET)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: str  # TOOL_KINDS
    url: str = ""
    remote: str = ""  # mcp: the tool's name on its server ('': the same name)
    read_only: bool = False
    idempotent: bool = False
    timeout_s: float = 30.0
    # An organisation's server (parley/org_tools.py), reached through the SSRF guard; the operator's are not.
    guarded: bool = False


@dataclass(frozen=True)
class ToolConfig:
    tools: Mapping[str, ToolSpec]
    rules: tuple[Mapping[str, Any], ...] = ()  # as written; streams/tool_policy.py rules_from checks them
    mode: str = "rules"
    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    max_rounds: int = 4
    approval_timeout_s: float = 600.0

    def offered(self, names: list[str]) -> list[ToolSpec]:
        """The specs of ``names``, in order; an unknown name is refused by name."""
        unknown = [n for n in names if n not in self.tools]
        if unknown:
            raise ConfigError(f"no tool named {unknown[0]!r} is registered")
        return [self.tools[n] for n in dict.fromkeys(names)]


def builtins(fetch_timeout_s: float = 10.0) -> dict[str, ToolSpec]:
    return {
        FETCH_URL: ToolSpec(
            FETCH_URL,
            "Read a web page or text file at a URL and return its text",
            _FETCH_PARAMETERS,
            "fetch",
            read_only=True,
            idempotent=True,
            timeout_s=fetch_timeout_s,
        )
    }


def optional_builtins() -> dict[str, ToolSpec]:
    """The built-ins a tools file may name. ``idempotent`` holds for all three: search reads only, and a
    memory change takes effect only with the call's ToolCallFinished (workers/tool_executor.py), so a call
    an earlier owner started and never finished changed nothing, and may be run again."""
    return {
        SEARCH_DOCUMENTS: ToolSpec(
            SEARCH_DOCUMENTS,
            "Search the user's own uploaded documents; returns passages with their file name and page",
            _SEARCH_PARAMETERS,
            "documents",
            read_only=True,
            idempotent=True,
            timeout_s=15.0,
        ),
        REMEMBER: ToolSpec(
            REMEMBER,
            "Remember a fact about the user for later conversations (the user's memory)",
            _FACT_PARAMETERS,
            "memory",
            idempotent=True,
            timeout_s=15.0,
        ),
        FORGET: ToolSpec(
            FORGET,
            "Forget a fact in the user's memory, given its text as remembered",
            _FACT_PARAMETERS,
            "memory",
            idempotent=True,
            timeout_s=15.0,
        ),
    }


def load(path: str | Path | None) -> ToolConfig:
    """The configuration in ``path`` (None or '': the built-ins alone). A bad file is refused whole, naming
    what is wrong: a half-read tool list would run tools the operator did not mean."""
    tools = builtins()
    if not path:
        return ToolConfig(tools)
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"PARLEY_TOOLS_FILE {path}: {type(exc).__name__}: {exc}") from exc
    return parse(raw, tools)


def parse(raw: Any, tools: dict[str, ToolSpec] | None = None) -> ToolConfig:
    tools = dict(builtins() if tools is None else tools)
    if not isinstance(raw, dict):
        raise ConfigError("the tools file must hold a JSON object")
    unknown = set(raw) - {"mode", "rules", "tools", "fetch", "builtins", "max_rounds", "approval_timeout_s"}
    if unknown:
        raise ConfigError(f"the tools file has unknown keys: {sorted(unknown)}")
    named = raw.get("builtins", [])
    offered = optional_builtins()
    if not isinstance(named, list) or not all(isinstance(n, str) and n in offered for n in named):
        raise ConfigError(f"builtins must be a list of names among {list(offered)}")
    tools.update({n: offered[n] for n in named})
    for i, entry in enumerate(raw.get("tools", [])):
        spec = _spec(entry, f"tools[{i}]")
        if spec.name in tools:
            raise ConfigError(f"tools[{i}]: {spec.name!r} is registered twice")
        tools[spec.name] = spec
    mode = raw.get("mode", "rules")
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    rules = raw.get("rules", [])
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise ConfigError("rules must be a list of objects")
    fetch = raw.get("fetch", {})
    try:
        networks = tuple(ipaddress.ip_network(n, strict=False) for n in fetch.get("allow_networks", []))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"fetch.allow_networks: {exc}") from exc
    max_rounds = raw.get("max_rounds", 4)
    timeout = raw.get("approval_timeout_s", 600)
    if not isinstance(max_rounds, int) or not 1 <= max_rounds <= 16:
        raise ConfigError("max_rounds must be an integer from 1 to 16")
    if not isinstance(timeout, (int, float)) or not 5 <= timeout <= 7 * 86400:
        raise ConfigError("approval_timeout_s must be from 5 seconds to 7 days")
    return ToolConfig(tools, tuple(rules), mode, networks, max_rounds, float(timeout))


def _spec(entry: Any, where: str) -> ToolSpec:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object")
    unknown = set(entry) - {"name", "description", "parameters", "kind", "url", "remote", "read_only", "idempotent", "timeout_s"}
    if unknown:
        raise ConfigError(f"{where} has unknown keys: {sorted(unknown)}")
    name = entry.get("name", "")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise ConfigError(f"{where}.name must be 1 to 64 letters, digits, _ or -")
    kind = entry.get("kind", "http")
    if kind not in ("http", "mcp"):  # the built-ins are Parley's own
        raise ConfigError(f"{where}.kind must be 'http' or 'mcp', got {kind!r}")
    remote = entry.get("remote", "")
    if not isinstance(remote, str) or (remote and kind != "mcp"):
        raise ConfigError(f"{where}.remote names an MCP server's tool (kind 'mcp' only)")
    url = entry.get("url", "")
    if not isinstance(url, str) or not re.match(r"https?://", url):
        raise ConfigError(f"{where}.url must be an http(s) URL")
    parameters = entry.get("parameters", {"type": "object"})
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ConfigError(f"{where}.parameters must be a JSON Schema of type object")
    timeout = entry.get("timeout_s", 30)
    if not isinstance(timeout, (int, float)) or not 0 < timeout <= 300:
        raise ConfigError(f"{where}.timeout_s must be above 0 and at most 300")
    return ToolSpec(
        name,
        str(entry.get("description", "")),
        parameters,
        kind,
        url,
        remote,
        bool(entry.get("read_only", False)),
        bool(entry.get("idempotent", False)),
        float(timeout),
    )


@dataclass(frozen=True)
class ToolSettings:
    """What the gateway, the permission broker and the tool executor read (DESIGN.md §13)."""

    tools_file: str = env(
        "PARLEY_TOOLS_FILE",
        "",
        "JSON file of the operator's tools and rules (parley/tool_registry.py); empty: the built-in fetch_url alone",
    )
    executor_id: str = env(
        "PARLEY_TOOL_EXECUTOR_ID",
        "",
        "Stable id of a tool executor (its Kafka transactional id): a restart under the same id aborts what the "
        "last one left open at once; empty: <hostname>-<pid>",
    )
    expiry_tick_s: float = env(
        "PARLEY_TOOLS_EXPIRY_TICK_S", 5.0, "How often the broker looks for calls left unanswered past their timeout"
    )
