"""Counterfactual routing: the router's own pool policy re-run, under another configuration,
over the logged InferenceRequested events, and how pool mix, escalations and cost would change.

Each turn of a replay file carries its InferenceRequested (the built prompt, token estimate,
max_tokens, the model the user named, the tier); ``request_of`` rebuilds the event, and
``streams.router.choose_pool`` — the function the running router calls — decides its pool,
conversation by conversation in the order the turns were asked for, with the one-way
escalation the router keeps per conversation. Configurations are ``RouterSettings``
(``PARLEY_ROUTER_*``): the baseline is the environment's, the counterfactual the baseline
with overrides, so a setting means exactly what it means to the router.

What it does not replay: admission (downgrades and sheds depend on the fleet's load at that
moment, which the turn log does not hold) and placement. Costs assume the same token counts;
a turn that lands on another pool than it did loses its cached prefix (all prompt tokens
priced uncached).
"""

from __future__ import annotations

import os
import tomllib
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parley.errors import ConfigError
from parley.settings import from_env
from schemas.events import InferenceRequested, PromptMessage
from streams.settings import RouterSettings
from tools.analysts.report import Price, turn_cost

if TYPE_CHECKING:
    from streams.router import Policy


def settings_with(overrides: dict[str, str], environ: dict[str, str] | None = None) -> RouterSettings:
    """RouterSettings from the environment with ``overrides`` (field names or PARLEY_ROUTER_* names)."""
    by_name = {f.name: f.metadata["env"] for f in fields(RouterSettings)}
    known = set(by_name.values())
    env = dict(os.environ if environ is None else environ)
    for key, value in overrides.items():
        var = by_name.get(key.lower(), key.upper())
        if var not in known:
            raise ConfigError(f"unknown router setting {key!r}; known: {', '.join(sorted(by_name))}")
        env[var] = str(value)
    try:
        return from_env(RouterSettings, env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def parse_overrides(pairs: list[str], config: Path | None = None) -> dict[str, str]:
    """``--set key=value`` pairs over a TOML file of ``key = value`` lines (the pairs win)."""
    out: dict[str, str] = {}
    if config is not None:
        try:
            out.update({k: str(v) for k, v in tomllib.loads(config.read_text()).items()})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"router overrides {config}: {exc}") from exc
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set {pair!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def request_of(turn: dict[str, Any]) -> InferenceRequested:
    """The InferenceRequested a turn record was folded from (the fields routing reads, and the ids)."""
    return InferenceRequested(
        conversation_id=turn["conversation_id"],
        user_id=turn["user_id"],
        request_id=turn["request_id"],
        parent_id=turn["user_message_id"],
        occurred_at=turn["requested_at"],
        messages=[PromptMessage(role=m["role"], content=m["content"]) for m in turn["prompt"]],
        prompt_tokens=turn["prompt_tokens_estimate"],
        budget_tokens=turn["budget_tokens"],
        max_tokens=turn["max_tokens"],
        model=turn["requested_model"],
        tier=turn["tier"],
    )


@dataclass(frozen=True)
class Outcome:
    pool: str | None  # None: refused (unknown model, too long)
    reason: str  # user_selected | classifier | sticky | escalated, or the refusal code


def decide(turns: list[dict[str, Any]], policy: Policy) -> dict[str, Outcome]:
    """The pool ``policy`` picks for each turn (request id → outcome), replaying per-conversation stickiness."""
    from streams.router import Refusal, choose_pool

    current: dict[str, str] = {}
    out = {}
    for turn in sorted(turns, key=lambda t: (t["requested_at"], t["request_id"])):
        req = request_of(turn)
        choice = choose_pool(req, policy, current.get(req.conversation_id))
        if isinstance(choice, Refusal):
            out[req.request_id] = Outcome(None, choice.code)
            continue
        current[req.conversation_id] = choice.pool
        out[req.request_id] = Outcome(choice.pool, choice.reason)
    return out


@dataclass
class Feedback:
    """The users' thumbs on a set of turns (``turns.Turn.feedback``, the last one standing)."""

    turns: int = 0
    up: int = 0
    down: int = 0

    def add(self, rating: str | None) -> None:
        self.turns += 1
        self.up += rating == "up"
        self.down += rating == "down"

    @property
    def rated(self) -> int:
        return self.up + self.down


@dataclass
class Side:
    """One configuration's totals."""

    pools: dict[str, int] = field(default_factory=dict)
    escalations: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    cost_per_1k_turns: float = 0.0
    #: Per pool, the feedback the turns this configuration sends there were given (where they actually ran):
    #: a pool whose share of thumbs down grows as a bar moves is being sent turns it serves badly.
    feedback: dict[str, Feedback] = field(default_factory=dict)


@dataclass
class Comparison:
    turns: int
    skipped: int  # turns with no logged prompt (never built): not routable
    logged: Side
    baseline: Side
    counterfactual: Side
    moved: dict[str, int]  # "from→to" (baseline → counterfactual) → turns
    overrides: dict[str, str]
    moved_feedback: dict[str, Feedback] = field(default_factory=dict)  # "from→to" → the moved turns' feedback

    def to_record(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _cost(turn: dict[str, Any], pool: str | None, prices: dict[str, Price], models: dict[str, str]) -> float:
    if pool is None:
        return 0.0
    same = pool == turn.get("pool")
    moved = {**turn, "pool": pool, "model": models.get(pool, ""), "cached_tokens": turn["cached_tokens"] if same else 0}
    return turn_cost(moved, prices)


def _side(turns: list[dict[str, Any]], outcome: dict[str, Outcome], prices: dict[str, Price], models: dict[str, str]) -> Side:
    side = Side()
    pools: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    total = 0.0
    for t in turns:
        o = outcome[t["request_id"]]
        if o.pool is None:
            refused[o.reason] += 1
        else:
            pools[o.pool] += 1
            side.feedback.setdefault(o.pool, Feedback()).add(t.get("feedback"))
        side.escalations += o.reason == "escalated"
        total += _cost(t, o.pool, prices, models)
    side.pools, side.refused = dict(sorted(pools.items())), dict(sorted(refused.items()))
    side.feedback = dict(sorted(side.feedback.items()))
    side.cost_per_1k_turns = total / len(turns) * 1000 if turns else 0.0
    return side


def compare(
    turns: list[dict[str, Any]], baseline: RouterSettings, counterfactual: RouterSettings, prices: dict[str, Price],
    overrides: dict[str, str] | None = None,
) -> Comparison:
    from streams.router import policy_from

    routable = [t for t in turns if t.get("prompt")]
    base_policy, cf_policy = policy_from(baseline), policy_from(counterfactual)
    base, cf = decide(routable, base_policy), decide(routable, cf_policy)
    # What happened: the pool the router chose before admission moved it (downgraded_from), as it logged it.
    logged = {
        t["request_id"]: Outcome((t.get("downgraded_from") or t.get("pool")) or None, t.get("route_reason") or t.get("error_code") or "")
        for t in routable
    }
    logged_side = Side()
    logged_side.pools = dict(sorted(Counter(o.pool for o in logged.values() if o.pool).items()))
    logged_side.escalations = sum(o.reason == "escalated" for o in logged.values())
    logged_side.refused = dict(sorted(Counter(o.reason for o in logged.values() if o.pool is None).items()))
    logged_side.cost_per_1k_turns = sum(turn_cost(t, prices) for t in routable) / len(routable) * 1000 if routable else 0.0
    for t in routable:
        pool = logged[t["request_id"]].pool
        if pool:
            logged_side.feedback.setdefault(pool, Feedback()).add(t.get("feedback"))
    logged_side.feedback = dict(sorted(logged_side.feedback.items()))
    moved: Counter[str] = Counter()
    moved_feedback: dict[str, Feedback] = {}
    for t in routable:
        r = t["request_id"]
        if base[r].pool != cf[r].pool:
            move = f"{base[r].pool or base[r].reason}→{cf[r].pool or cf[r].reason}"
            moved[move] += 1
            moved_feedback.setdefault(move, Feedback()).add(t.get("feedback"))
    return Comparison(
        turns=len(routable),
        skipped=len(turns) - len(routable),
        logged=logged_side,
        baseline=_side(routable, base, prices, {p.name: p.model for p in base_policy.pools.values()}),
        counterfactual=_side(routable, cf, prices, {p.name: p.model for p in cf_policy.pools.values()}),
        moved=dict(sorted(moved.items())),
        overrides=dict(overrides or {}),
        moved_feedback=dict(sorted(moved_feedback.items())),
    )


@dataclass
class SweepRow:
    value: str  # the candidate value of the swept setting
    side: Side


def sweep(
    turns: list[dict[str, Any]], key: str, values: list[str], prices: dict[str, Price], environ: dict[str, str] | None = None
) -> list[SweepRow]:
    """The router's pool policy under each candidate value of one setting (a threshold, say), over this
    environment's settings (``environ``, else the process's): per value, where the turns would go and the
    feedback those turns were given, so a value can be chosen on labelled turns."""
    from streams.router import policy_from

    routable = [t for t in turns if t.get("prompt")]
    rows = []
    for value in values:
        settings = settings_with({key: value}, environ)
        policy = policy_from(settings)
        rows.append(SweepRow(value, _side(routable, decide(routable, policy), prices, {p.name: p.model for p in policy.pools.values()})))
    return rows


def _share(part: int, whole: int) -> str:
    return f"{part / whole * 100:.1f}%" if whole else "–"


def feedback_markdown(c: Comparison) -> list[str]:
    """Per configuration and pool: the turns it sends there and the thumbs those turns were given."""
    lines = [
        "",
        "## Feedback of the turns each configuration sends where",
        "",
        "| configuration | pool | turns | rated | up | down |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, side in (("logged", c.logged), ("baseline", c.baseline), ("counterfactual", c.counterfactual)):
        for pool, f in side.feedback.items():
            lines.append(f"| {name} | {pool} | {f.turns} | {f.rated} | {_share(f.up, f.turns)} | {_share(f.down, f.turns)} |")
    for move, f in c.moved_feedback.items():
        lines.append(f"| moved {move} | | {f.turns} | {f.rated} | {_share(f.up, f.turns)} | {_share(f.down, f.turns)} |")
    lines += ["", "Up and down are shares of the turns (a turn nobody rated counts in neither); the thumbs are those "
              "the turns got where they actually ran."]  # fmt: skip
    return lines


def sweep_markdown(key: str, rows: list[SweepRow]) -> str:
    pools = sorted({p for r in rows for p in r.side.pools})
    lines = [
        f"# Counterfactual sweep of {key}",
        "",
        f"| {key} | pool | turns | rated | up | down | est. USD / 1,000 turns |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for pool in pools:
            f = r.side.feedback.get(pool, Feedback())
            lines.append(
                f"| {r.value} | {pool} | {f.turns} | {f.rated} | {_share(f.up, f.turns)} | {_share(f.down, f.turns)} "
                f"| {r.side.cost_per_1k_turns:.4f} |"
            )
    lines += ["", "Per candidate value: the turns the router's pool policy would send to each pool and the thumbs those "
              "turns were given (shares of the turns), with the estimated cost of that whole configuration."]  # fmt: skip
    return "\n".join(lines) + "\n"


def markdown(c: Comparison) -> str:
    pools = sorted({*c.logged.pools, *c.baseline.pools, *c.counterfactual.pools})
    rows = [
        ("logged", c.logged),
        ("baseline (this environment's router settings)", c.baseline),
        ("counterfactual (" + (", ".join(f"{k}={v}" for k, v in c.overrides.items()) or "no overrides") + ")", c.counterfactual),
    ]
    lines = [
        "# Counterfactual routing",
        "",
        f"{c.turns} turns re-routed by the router's pool policy (admission and placement not replayed)"
        + (f"; {c.skipped} turns without a built prompt left out" if c.skipped else "")
        + ".",
        "",
        "| configuration | " + " | ".join(pools) + " | escalations | refused | est. USD / 1,000 turns |",
        "|---|" + "---:|" * (len(pools) + 3),
    ]
    for name, side in rows:
        refused = ", ".join(f"{k} {v}" for k, v in side.refused.items()) or "0"
        counts = " | ".join(str(side.pools.get(p, 0)) for p in pools)
        lines.append(f"| {name} | {counts} | {side.escalations} | {refused} | {side.cost_per_1k_turns:.4f} |")
    lines += ["", "Turns that would move (baseline → counterfactual): " + (", ".join(f"{k} {v}" for k, v in c.moved.items()) or "none") + "."]
    lines += feedback_markdown(c)
    return "\n".join(lines) + "\n"
