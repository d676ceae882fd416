"""`parley report`: the numbers of a replay file (pure) and their Markdown.

Every figure is computed from the turn records alone (``replay.load``), with the
definitions written next to it in the Markdown, so a reader who never opened the
code can check one by hand:

* TTFT percentiles (linear interpolation between closest ranks, as numpy's default)
  of ``ttft_ms`` by model × cache outcome, over turns that reached an engine;
* tokens/s: ``completion_tokens / duration`` per turn, by model;
* routing mix: turns per pool among those the router placed (shed turns apart);
* downgrade and shed rates: over every turn asked for;
* cost per 1,000 turns: each turn's uncached prompt, cached prompt and completion tokens
  at its model's (else its pool's) price per million tokens, summed, per 1,000 turns.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from parley.errors import ConfigError


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    prompt: float
    cached: float
    completion: float


#: Defaults: list prices of similar open models served by the pool's size class (configurable with --prices).
DEFAULT_PRICES: dict[str, Price] = {
    "small": Price(prompt=0.10, cached=0.05, completion=0.40),
    "medium": Price(prompt=0.30, cached=0.15, completion=1.20),
    "frontier": Price(prompt=1.20, cached=0.60, completion=4.80),
}


def load_prices(path: Path | None) -> dict[str, Price]:
    """A TOML price table: one ``[name]`` table per pool or model with prompt, cached, completion."""
    if path is None:
        return dict(DEFAULT_PRICES)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"price table {path}: {exc}") from exc
    out = {}
    for name, entry in raw.items():
        try:
            out[name] = Price(float(entry["prompt"]), float(entry.get("cached", entry["prompt"])), float(entry["completion"]))
        except (TypeError, KeyError, ValueError) as exc:
            raise ConfigError(f"price table {path}: [{name}] needs numbers prompt, completion (and cached): {exc}") from exc
    return out


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _price(turn: dict[str, Any], prices: dict[str, Price]) -> Price | None:
    return prices.get(turn.get("model") or "") or prices.get(turn.get("pool") or "")


def turn_cost(turn: dict[str, Any], prices: dict[str, Price]) -> float:
    price = _price(turn, prices)
    if price is None:
        return 0.0
    cached = turn["cached_tokens"]
    return ((turn["prompt_tokens"] - cached) * price.prompt + cached * price.cached + turn["completion_tokens"] * price.completion) / 1e6


@dataclass(frozen=True)
class TtftRow:
    model: str
    cache: str
    turns: int
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True)
class RateRow:
    model: str
    turns: int
    mean: float
    p50: float


@dataclass(frozen=True)
class FeedbackRow:
    """Users' word on the turns of one (pool, model, cache outcome): thumbs given (FeedbackGiven, the last
    one of a reply standing) and what they did instead of rating (implicit signals)."""

    pool: str
    model: str
    cache: str  # hit | miss | none (never reached an engine)
    turns: int
    up: int
    down: int
    regenerated: int  # another reply was asked for to the same message afterwards
    edited: int  # the user's message was edited afterwards (a sibling message under the same parent)
    stopped: int  # the user stopped the reply (finish reason cancelled)


@dataclass
class Report:
    turns: int
    finish_reasons: dict[str, int]
    ttft: list[TtftRow]
    tokens_per_s: list[RateRow]
    routing_mix: dict[str, float]  # pool → share of placed turns
    placed: dict[str, int]  # pool → placed turns
    route_reasons: dict[str, int]
    downgrade_rate: float
    shed_rate: float
    cost_per_1k_turns: float
    cost_per_1k_by_pool: dict[str, float]  # pool → cost of its turns per 1,000 of all turns
    cache_hit_rate: float  # among turns that reached an engine
    unpriced: list[str] = field(default_factory=list)  # models/pools with no price (costed 0)
    feedback: list[FeedbackRow] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def compute(records: list[dict[str, Any]], prices: dict[str, Price]) -> Report:
    n = len(records)
    ttft_groups: dict[tuple[str, str], list[float]] = {}
    rates: dict[str, list[float]] = {}
    for t in records:
        if t.get("ttft_ms") is not None and t.get("cache") is not None:
            ttft_groups.setdefault((t["model"], t["cache"]), []).append(float(t["ttft_ms"]))
        if t.get("tokens_per_s") is not None:
            rates.setdefault(t["model"], []).append(float(t["tokens_per_s"]))
    placed = Counter(t["pool"] for t in records if t.get("route_reason"))
    placed_total = sum(placed.values())
    engine = [t for t in records if t.get("cache") is not None]
    by_pool: Counter[str] = Counter()
    total_cost = 0.0
    for t in records:
        cost = turn_cost(t, prices)
        total_cost += cost
        by_pool[t.get("pool") or "none"] += cost
    unpriced = sorted(
        {t.get("model") or t.get("pool") or "?" for t in records if _price(t, prices) is None and t.get("prompt_tokens")}
    )
    per_1k = (lambda c: c / n * 1000) if n else (lambda c: 0.0)
    return Report(
        turns=n,
        finish_reasons=dict(sorted(Counter(t.get("finish_reason") or "open" for t in records).items())),
        ttft=[
            TtftRow(model, cache, len(v), percentile(v, 50), percentile(v, 95), percentile(v, 99))
            for (model, cache), v in sorted(ttft_groups.items())
        ],
        tokens_per_s=[RateRow(m, len(v), sum(v) / len(v), percentile(v, 50)) for m, v in sorted(rates.items())],
        routing_mix={p: c / placed_total for p, c in sorted(placed.items())},
        placed=dict(sorted(placed.items())),
        route_reasons=dict(sorted(Counter(t["route_reason"] for t in records if t.get("route_reason")).items())),
        downgrade_rate=sum(bool(t.get("downgraded")) for t in records) / n if n else 0.0,
        shed_rate=sum(bool(t.get("shed")) for t in records) / n if n else 0.0,
        cost_per_1k_turns=per_1k(total_cost),
        cost_per_1k_by_pool={p: per_1k(c) for p, c in sorted(by_pool.items())},
        cache_hit_rate=sum(t["cache"] == "hit" for t in engine) / len(engine) if engine else 0.0,
        unpriced=unpriced,
        feedback=feedback_rows(records),
    )


def regenerated_turns(records: list[dict[str, Any]]) -> set[str]:
    """Request ids of the turns whose message a later turn asked another reply to (a regenerate)."""
    asked_again: dict[str, int] = {}  # user message id → when a regenerate of it was first asked for
    for t in records:
        if t.get("kind") == "regenerate":
            prior = asked_again.get(t["user_message_id"])
            asked_again[t["user_message_id"]] = t["requested_at"] if prior is None else min(prior, t["requested_at"])
    return {t["request_id"] for t in records if asked_again.get(t["user_message_id"], -1) > t["requested_at"]}


def feedback_rows(records: list[dict[str, Any]]) -> list[FeedbackRow]:
    """Explicit and implicit feedback by pool, model and cache outcome. A turn counts as regenerated or
    edited when a later turn of the same conversation asked again for its message, or answered a new
    version of it (the same parent): the user did not take this reply as it was."""
    regenerated = regenerated_turns(records)
    versions: dict[tuple[str, str | None], list[tuple[int, str]]] = {}  # (conversation, parent) → [(when, message)]
    for t in records:
        if t.get("kind") == "message":
            versions.setdefault((t["conversation_id"], t.get("user_parent_id")), []).append((t["requested_at"], t["user_message_id"]))
    groups: dict[tuple[str, str, str], list[int]] = {}
    for t in records:
        row = groups.setdefault((t.get("pool") or "none", t.get("model") or "none", t.get("cache") or "none"), [0] * 6)
        row[0] += 1
        row[1] += t.get("feedback") == "up"
        row[2] += t.get("feedback") == "down"
        row[3] += t["request_id"] in regenerated
        row[4] += t.get("kind") == "message" and any(
            when > t["requested_at"] and mid != t["user_message_id"]
            for when, mid in versions.get((t["conversation_id"], t.get("user_parent_id")), ())
        )
        row[5] += t.get("finish_reason") == "cancelled"
    return [FeedbackRow(pool, model, cache, *counts) for (pool, model, cache), counts in sorted(groups.items())]


def _f(x: float, digits: int = 1) -> str:
    return "–" if isinstance(x, float) and math.isnan(x) else f"{x:,.{digits}f}"


def markdown(r: Report, source: str, charts: list[str], prices: dict[str, Price]) -> str:
    lines = [
        f"# Parley turn report — {source}",
        "",
        f"{r.turns} turns. Finish reasons: " + ", ".join(f"{k} {v}" for k, v in r.finish_reasons.items()) + ".",
        "",
        "## Time to first token",
        "",
        "Milliseconds from the engine receiving the prompt to its first token (`UsageRecorded.ttft_ms`), "
        "for turns that reached an engine. A *hit* reused part of the prompt from the engine's prefix cache "
        "(`cached_tokens > 0`); a *miss* computed all of it. Percentiles interpolate linearly between ranks.",
        "",
        "| model | cache | turns | p50 ms | p95 ms | p99 ms |",
        "|---|---|---:|---:|---:|---:|",
        *(f"| {row.model} | {row.cache} | {row.turns} | {_f(row.p50)} | {_f(row.p95)} | {_f(row.p99)} |" for row in r.ttft),
        "",
        f"Cache hit rate among those turns: {r.cache_hit_rate:.1%}.",
        "",
        "## Generation speed",
        "",
        "Completion tokens divided by the generation's duration (first token included), per turn.",
        "",
        "| model | turns | mean tokens/s | p50 tokens/s |",
        "|---|---:|---:|---:|",
        *(f"| {row.model} | {row.turns} | {_f(row.mean)} | {_f(row.p50)} |" for row in r.tokens_per_s),
        "",
        "## Routing",
        "",
        "Share of the turns the router placed on each pool (shed turns are not placed):",
        "",
        "| pool | turns | share |",
        "|---|---:|---:|",
        *(f"| {p} | {r.placed[p]} | {share:.1%} |" for p, share in r.routing_mix.items()),
        "",
        "Why the router placed them: " + (", ".join(f"{k} {v}" for k, v in r.route_reasons.items()) or "none") + ".",
        "",
        f"- **Downgraded** (a free turn moved to a smaller pool under load): {r.downgrade_rate:.1%} of all turns.",
        f"- **Shed** (refused as overloaded, the user told to retry): {r.shed_rate:.1%} of all turns.",
        "",
        "## Cost",
        "",
        f"**{_f(r.cost_per_1k_turns, 4)} USD per 1,000 turns**, from each turn's tokens at these prices "
        "(USD per million tokens; a model's own price wins over its pool's):",
        "",
        "| pool or model | prompt | cached prompt | completion |",
        "|---|---:|---:|---:|",
        *(f"| {name} | {p.prompt:g} | {p.cached:g} | {p.completion:g} |" for name, p in sorted(prices.items())),
        "",
        "By pool, per 1,000 turns of the whole mix: "
        + ", ".join(f"{p} {_f(c, 4)}" for p, c in r.cost_per_1k_by_pool.items())
        + ".",
    ]
    if r.unpriced:
        lines += ["", f"No price for {', '.join(r.unpriced)}: counted as free."]
    pct = lambda n, d: f"{n / d:.1%}" if d else "–"  # noqa: E731
    lines += [
        "",
        "## Feedback",
        "",
        "Thumbs the users gave (`FeedbackGiven`, the last rating of a reply standing) and what they did "
        "instead: asked for another reply to the same message (*regenerated*), sent a new version of their "
        "message (*edited*), or stopped the reply (*stopped*); shares of the group's turns.",
        "",
        "| pool | model | cache | turns | up | down | regenerated | edited | stopped |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {f.pool} | {f.model} | {f.cache} | {f.turns} | {f.up} ({pct(f.up, f.turns)}) | {f.down} ({pct(f.down, f.turns)}) "
            f"| {pct(f.regenerated, f.turns)} | {pct(f.edited, f.turns)} | {pct(f.stopped, f.turns)} |"
            for f in r.feedback
        ),
    ]
    if charts:
        lines += ["", "## Charts", "", *(f"![{c}]({c})" for c in charts)]
    return "\n".join(lines) + "\n"
