"""The permission broker's rule order (streams/tool_policy.py): deny wins, no rule asks, orgs only tighten."""

from __future__ import annotations

import json

import pytest

from streams.tool_policy import Decision, Effect, Layer, Mode, RuleError, Tool, decide, rules_from

FETCH = Tool("fetch_url", {
    "type": "object",
    "properties": {"url": {"type": "string"}, "headers": {"type": "array", "items": {"type": "string"}}},
    "required": ["url"],
    "additionalProperties": False,
})
SEARCH = Tool("search_documents", {"type": "object", "properties": {"query": {"type": "string"}}}, read_only=True)


def operator(*entries: dict) -> tuple:
    return rules_from(list(entries), Layer.OPERATOR)


def org(*entries: dict) -> tuple:
    return rules_from(list(entries), Layer.ORG)


def call(tool: Tool | None, arguments: dict | str, **kwargs) -> Decision:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    kwargs.setdefault("operator", ())
    return decide(tool, tool.name if tool else "nope", text, **kwargs)


def test_an_unregistered_tool_is_denied_in_every_mode() -> None:
    for mode in Mode:
        assert call(None, {}, mode=mode) == Decision(Effect.DENY, "unknown-tool", "no tool of that name is registered")


@pytest.mark.parametrize("arguments", ["{", "[1]", {"url": 3}, {"url": "x", "extra": 1}, {}])
def test_arguments_outside_the_schema_are_denied_before_any_rule(arguments) -> None:
    allow_all = operator({"name": "all", "effect": "allow", "tool": {"glob": "*"}})
    decision = call(FETCH, arguments, operator=allow_all, mode=Mode.ALLOW_ALL)
    assert (decision.effect, decision.rule) == (Effect.DENY, "invalid-arguments")


def test_the_reason_for_bad_arguments_names_the_place_never_the_value() -> None:
    decision = call(FETCH, {"url": "https://secret.example/token=abc", "headers": [7]})
    assert "headers/0" in decision.reason and "secret" not in decision.reason


def test_deny_beats_allow_rules_and_every_mode_whichever_layer_says_it() -> None:
    allow = operator({"name": "fetch", "effect": "allow", "tool": "fetch_url"})
    deny_internal = {"name": "no-internal", "effect": "deny", "tool": "fetch_url",
                     "arguments": {"url": {"prefix": "http://10."}}}
    for layer_rules in (dict(operator=allow + operator(deny_internal)), dict(operator=allow, org=org(deny_internal))):
        for mode in Mode:
            decision = call(FETCH, {"url": "http://10.0.0.1/"}, mode=mode, **layer_rules)
            assert decision.effect is Effect.DENY and decision.rule.endswith(":no-internal")
        assert call(FETCH, {"url": "https://example.org/"}, **layer_rules).effect is Effect.ALLOW


def test_with_no_matching_rule_a_tool_not_declared_read_only_is_asked() -> None:
    assert call(FETCH, {"url": "https://example.org/"}) == Decision(Effect.ASK, "no-rule", "no rule allows this tool")
    assert call(SEARCH, {"query": "q"}).effect is Effect.ALLOW


def test_arguments_outside_an_allow_rule_are_asked_even_in_allow_all_mode() -> None:
    rules = operator({"name": "docs-site", "effect": "allow", "tool": "fetch_url",
                      "arguments": {"url": {"prefix": "https://docs.example.org/"}}})
    inside = call(FETCH, {"url": "https://docs.example.org/a"}, operator=rules, mode=Mode.ALLOW_ALL)
    outside = call(FETCH, {"url": "https://evil.example/"}, operator=rules, mode=Mode.ALLOW_ALL)
    assert inside == Decision(Effect.ALLOW, "operator:docs-site", "")
    assert (outside.effect, outside.rule) == (Effect.ASK, "operator:docs-site")


def test_allow_all_allows_what_no_rule_decides_and_ask_mode_asks_even_for_allowed_calls() -> None:
    assert call(FETCH, {"url": "https://a.example/"}, mode=Mode.ALLOW_ALL).rule == "mode:allow-all"
    rules = operator({"name": "fetch", "effect": "allow", "tool": "fetch_url"})
    assert call(FETCH, {"url": "https://a.example/"}, operator=rules, mode=Mode.ASK).rule == "mode:ask"
    assert call(SEARCH, {"query": "q"}, mode=Mode.ASK).effect is Effect.ASK


def test_an_organisation_tightens_and_never_loosens() -> None:
    # Its allow rule does not allow what the operator leaves to the user ...
    loosen = org({"name": "fetch", "effect": "allow", "tool": "fetch_url"})
    assert call(FETCH, {"url": "https://a.example/"}, org=loosen).effect is Effect.ASK
    # ... but it scopes what the operator allows, and its ask rules ask.
    allow = operator({"name": "fetch", "effect": "allow", "tool": "fetch_url"})
    scope = org({"name": "ours", "effect": "allow", "tool": "fetch_url", "arguments": {"url": {"glob": "https://*.ours.example/*"}}})
    assert call(FETCH, {"url": "https://wiki.ours.example/p"}, operator=allow, org=scope).effect is Effect.ALLOW
    assert call(FETCH, {"url": "https://theirs.example/p"}, operator=allow, org=scope).rule == "org:ours"
    ask = org({"name": "careful", "effect": "ask", "tool": {"glob": "*"}})
    assert call(SEARCH, {"query": "q"}, operator=allow, org=ask).rule == "org:careful"


def test_a_list_argument_is_allowed_only_when_every_element_is_inside_and_denied_when_any_is_outside() -> None:
    allow = operator({"name": "safe-headers", "effect": "allow", "tool": "fetch_url",
                      "arguments": {"headers": {"prefix": "Accept"}}})
    ok = {"url": "https://a.example/", "headers": ["Accept: text/html", "Accept-Language: en"]}
    smuggled = {"url": "https://a.example/", "headers": ["Accept: text/html", "Authorization: Bearer x"]}
    assert call(FETCH, ok, operator=allow).effect is Effect.ALLOW
    assert call(FETCH, smuggled, operator=allow).effect is Effect.ASK
    deny = operator({"name": "no-auth", "effect": "deny", "tool": "fetch_url",
                     "arguments": {"headers": {"prefix": "Authorization"}}})
    assert call(FETCH, smuggled, operator=deny).effect is Effect.DENY
    assert call(FETCH, ok, operator=deny).effect is Effect.ASK


def test_a_missing_argument_path_matches_no_rule() -> None:
    deny = operator({"name": "no-headers", "effect": "deny", "tool": "fetch_url", "arguments": {"headers": {"glob": "*"}}})
    assert call(FETCH, {"url": "https://a.example/"}, operator=deny).effect is Effect.ASK


def test_matchers_exact_prefix_glob_and_operator_regex() -> None:
    for matcher, hit, miss in [
        ("fetch_url", "fetch_url", "fetch_urls"),
        ({"prefix": "fetch_"}, "fetch_url", "refetch"),
        ({"glob": "fetch_*"}, "fetch_url", "Fetch_url"),
        ({"regex": "fetch_(url|page)"}, "fetch_page", "fetch_page2"),
    ]:
        (rule,) = operator({"name": "r", "effect": "deny", "tool": matcher})
        assert rule.names(hit) and not rule.names(miss)


@pytest.mark.parametrize(("entries", "layer", "message"), [
    ({"name": "r"}, Layer.OPERATOR, "must be a list"),
    ([{"name": "r", "effect": "maybe", "tool": "t"}], Layer.OPERATOR, "`effect` must be allow, ask or deny"),
    ([{"name": "bad name!", "effect": "deny", "tool": "t"}], Layer.OPERATOR, "`name` must be"),
    ([{"name": "r", "effect": "deny", "tool": {"regex": "t.*"}}], Layer.ORG, "operator's rules only"),
    ([{"name": "r", "effect": "deny", "tool": {"regex": "("}}], Layer.OPERATOR, "not a regular expression"),
    ([{"name": "r", "effect": "deny", "tool": {"like": "t"}}], Layer.OPERATOR, "unknown matcher"),
    ([{"name": "r", "effect": "deny", "tool": "t", "when": 1}], Layer.OPERATOR, "unknown field(s) when"),
    ([{"name": "r", "effect": "deny", "tool": "t", "arguments": {"a/b": "x"}}], Layer.OPERATOR, "dotted names"),
    ([{"name": "r", "effect": "deny", "tool": ""}], Layer.OPERATOR, "1 to 500 characters"),
    ([{"name": "r", "effect": "deny", "tool": "t"}, {"name": "r", "effect": "ask", "tool": "u"}], Layer.OPERATOR,
     "unique"),
])
def test_a_bad_rule_is_refused_naming_what_is_wrong(entries, layer, message) -> None:
    with pytest.raises(RuleError, match="^.*" + message.replace("(", r"\(").replace(")", r"\)")):
        rules_from(entries, layer)


def test_nested_lists_cannot_hide_a_value_from_a_deny_rule_and_deep_arguments_are_denied() -> None:
    paths = Tool("read", {"type": "object", "properties": {"paths": {"type": "array"}}})
    deny = operator({"name": "no-etc", "effect": "deny", "tool": "read", "arguments": {"paths": {"prefix": "/etc/"}}})
    assert call(paths, {"paths": [["/tmp/a", ["/etc/passwd"]]]}, operator=deny).effect is Effect.DENY
    deep: object = "x"
    for _ in range(100):
        deep = [deep]
    decision = call(paths, {"paths": deep}, operator=deny)
    assert (decision.effect, decision.rule) == (Effect.DENY, "invalid-arguments") and "64" in decision.reason
    assert call(paths, "[" * 100_000 + "]" * 100_000).rule == "invalid-arguments"  # past the JSON parser's depth
