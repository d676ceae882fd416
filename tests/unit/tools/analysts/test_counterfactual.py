"""Counterfactual routing runs the router's own policy: the baseline reproduces what the router logged,
and a changed setting moves turns the way the policy says it would."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from parley.errors import ConfigError
from streams.router import Router, policy_from
from streams.settings import RouterSettings
from schemas.events import InferenceRouted, PromptMessage, InferenceRequested
from tools.analysts import counterfactual, report

EASY = "What's the capital of France?"
CODE = "Why does this fail?\n```python\ndef f(x):\n    return x/0\n```"
#: Three pools serving three models, as in production (the default describes the local stack: one model for all).
ENV: dict[str, str] = {
    "PARLEY_ROUTER_POOLS": "small=Qwen/Qwen2.5-0.5B-Instruct,medium=Qwen/Qwen2.5-7B-Instruct,frontier=Qwen/Qwen2.5-72B-Instruct",
    "PARLEY_ROUTER_CONTEXT_TOKENS": "small=32768,medium=32768,frontier=131072",
}


def _turn(cid: str, text: str, at: int, **over) -> dict:
    turn = {
        "request_id": str(uuid.uuid4()), "conversation_id": cid, "user_id": "u", "user_message_id": str(uuid.uuid4()),
        "requested_at": at, "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": text}],
        "prompt_tokens_estimate": 60, "budget_tokens": 3072, "max_tokens": 100, "requested_model": None, "tier": "plus",
        "pool": "", "model": "", "route_reason": "", "downgraded_from": None, "error_code": None,
        "prompt_tokens": 60, "cached_tokens": 30, "completion_tokens": 40,
    }
    return {**turn, **over}


def _logged_by_the_router(turns: list[dict], settings: RouterSettings) -> list[dict]:
    """What the real Router emitted for these requests (no fleet: no admission pressure)."""
    router = Router(policy_from(settings))
    out = []
    for t in turns:
        (routed,) = router.route(counterfactual.request_of(t), 0.0)
        assert isinstance(routed, InferenceRouted)
        out.append({**t, "pool": routed.pool, "model": routed.model, "route_reason": routed.route_reason})
    return out


def test_the_baseline_reproduces_the_routers_logged_pools_and_escalations() -> None:
    settings = counterfactual.settings_with({}, ENV)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    turns = _logged_by_the_router(
        [_turn(a, EASY, 1), _turn(a, CODE, 2), _turn(a, EASY, 3), _turn(b, EASY, 4), _turn(b, EASY, 5)], settings
    )
    c = counterfactual.compare(turns, settings, settings, report.DEFAULT_PRICES)
    assert c.baseline.pools == c.logged.pools == {"medium": 2, "small": 3}
    assert c.baseline.escalations == c.logged.escalations == 1
    assert c.counterfactual == c.baseline and c.moved == {}
    assert c.logged.cost_per_1k_turns == pytest.approx(c.baseline.cost_per_1k_turns)


def test_a_lower_bar_moves_turns_up_and_costs_more() -> None:
    base = counterfactual.settings_with({}, ENV)
    cheaper_bar = counterfactual.settings_with({"medium_score": "0.01", "PARLEY_ROUTER_FRONTIER_SCORE": "0.02"}, ENV)
    turns = _logged_by_the_router([_turn(str(uuid.uuid4()), EASY, i) for i in range(4)], base)
    c = counterfactual.compare(turns, base, cheaper_bar, report.DEFAULT_PRICES, {"medium_score": "0.01"})
    assert c.baseline.pools == {"small": 4} and c.counterfactual.pools == {"frontier": 4}
    assert c.moved == {"small→frontier": 4}
    assert c.counterfactual.cost_per_1k_turns > c.baseline.cost_per_1k_turns
    assert "small→frontier 4" in counterfactual.markdown(c)


def test_removing_a_pool_refuses_the_turns_that_named_its_model() -> None:
    base = counterfactual.settings_with({}, ENV)
    only_small = counterfactual.settings_with({"pools": "small=Qwen/Qwen2.5-0.5B-Instruct"}, ENV)
    turns = [_turn(str(uuid.uuid4()), EASY, 1, requested_model="Qwen/Qwen2.5-7B-Instruct")]
    c = counterfactual.compare(turns, base, only_small, report.DEFAULT_PRICES)
    assert c.baseline.pools == {"medium": 1} and c.counterfactual.refused == {"unknown_model": 1}


def test_overrides_from_a_file_and_flags_and_their_errors(tmp_path: Path) -> None:
    f = tmp_path / "router.toml"
    f.write_text("medium_score = 1.5\nbusy = 0.5\n")
    assert counterfactual.parse_overrides(["busy=0.7"], f) == {"medium_score": "1.5", "busy": "0.7"}
    with pytest.raises(ConfigError, match="unknown router setting"):
        counterfactual.settings_with({"nope": "1"}, ENV)
    with pytest.raises(ConfigError, match="PARLEY_ROUTER_MEDIUM_SCORE"):
        counterfactual.settings_with({"medium_score": "9", "frontier_score": "1"}, ENV)
    with pytest.raises(ConfigError, match="key=value"):
        counterfactual.parse_overrides(["medium_score"])


def test_request_of_rebuilds_the_routing_inputs() -> None:
    t = _turn("c", CODE, 7, requested_model="x", tier="free")
    req = counterfactual.request_of(t)
    assert isinstance(req, InferenceRequested) and req.messages[-1] == PromptMessage(role="user", content=CODE)
    assert (req.model, req.tier, req.prompt_tokens, req.max_tokens) == ("x", "free", 60, 100)


def test_each_configuration_shows_the_feedback_of_the_turns_it_sends_to_each_pool() -> None:
    base = counterfactual.settings_with({}, ENV)
    lower = counterfactual.settings_with({"medium_score": "0.01", "frontier_score": "100"}, ENV)
    turns = _logged_by_the_router([_turn(str(uuid.uuid4()), EASY, i) for i in range(4)], base)
    for t, rating in zip(turns, ["down", "down", "up", None]):
        t["feedback"] = rating
    c = counterfactual.compare(turns, base, lower, report.DEFAULT_PRICES, {"medium_score": "0.01"})
    f = c.baseline.feedback["small"]
    assert (f.turns, f.rated, f.up, f.down) == (4, 3, 1, 2)
    assert set(c.counterfactual.feedback) == {"medium"} and c.counterfactual.feedback["medium"].down == 2
    assert c.logged.feedback["small"].up == 1
    moved = c.moved_feedback["small→medium"]
    assert (moved.turns, moved.up, moved.down) == (4, 1, 2)
    text = counterfactual.markdown(c)
    assert "| baseline | small | 4 | 3 | 25.0% | 50.0% |" in text
    assert "| moved small→medium | | 4 | 3 | 25.0% | 50.0% |" in text


def test_a_sweep_of_a_threshold_shows_where_each_candidate_sends_the_rated_turns() -> None:
    base = counterfactual.settings_with({}, ENV)
    cid = str(uuid.uuid4())
    turns = _logged_by_the_router([_turn(str(uuid.uuid4()), EASY, 1), _turn(cid, CODE, 2)], base)
    turns[0]["feedback"], turns[1]["feedback"] = "up", "down"
    rows = counterfactual.sweep(turns, "medium_score", ["0.01", "2.0"], report.DEFAULT_PRICES, ENV)
    assert [r.value for r in rows] == ["0.01", "2.0"]
    low, default = rows[0].side, rows[1].side
    assert low.pools == {"medium": 2} and low.feedback["medium"].up == 1 and low.feedback["medium"].down == 1
    assert default.pools == {"medium": 1, "small": 1}
    assert (default.feedback["small"].up, default.feedback["medium"].down) == (1, 1)
    text = counterfactual.sweep_markdown("medium_score", rows)
    assert "| 0.01 | medium | 2 | 2 | 50.0% | 50.0% |" in text and "| 2.0 | small | 1 | 1 | 100.0% | 0.0% |" in text
    with pytest.raises(ConfigError, match="unknown router setting 'medium_bar'"):
        counterfactual.sweep(turns, "medium_bar", ["1"], report.DEFAULT_PRICES, ENV)
