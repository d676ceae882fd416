"""Placement policies on a simulated fleet: prefix-cache hit rate against two limits, load imbalance, queue wait.

A discrete-event simulation, so the figures are the same on any machine: a
fleet of replicas, each with a prefix cache (LRU over conversations, finite
token capacity) and a fixed number of concurrent slots, fed the chat traces of
``bench.router_traces``. Every policy sees the same users, who send a turn a
think time after the previous reply. Parley's policy is
``streams.placement.Placement``, the code the router runs; ``greedy-cache``
knows every replica's cache and picks the longest cached prefix, ties to the
least loaded (a strong heuristic, not an optimum: it can beat Parley or lose
to it).

Each policy's hit rate is reported against two limits:

- **physical limit** (``router_traces.physical_limit``): every token computed
  before for the conversation, and the system prompt, is a hit. No cache size,
  no placement can beat it.
- **capacity bound** (``capacity_bound``): the most any placement and any
  eviction could have kept with the fleet's *total* cache, R x C tokens, given
  when this run's turns began and ended. A turn's hit beyond the system prompt
  is a prefix of its conversation that sat in some cache from the end of the
  conversation's previous turn to this turn's start (its *gap*). Whatever a
  run does, at every instant the prefixes it holds for the gaps open then fit
  in R x C, one per conversation (a conversation has one gap open at a time).
  So its hits are a feasible point of: choose x_g <= min(size_g, C) tokens
  per gap (a hit comes from one replica's cache), with the x of the gaps open
  at any instant summing to at most R x C; maximise sum x_g. That problem
  drops the rest of what the fleet imposes (each C shared by the conversations
  placed on that replica, entries kept or dropped whole, eviction without
  knowing the future, where the turn may run), so its optimum is an upper
  bound; read per token it is the largest (R x C)-colourable set of intervals,
  which the earliest-end-first greedy solves exactly (Yannakakis & Gavril
  1987). Slot limits enter through the timeline only, so the bound is per
  run: no timeline-free figure bounds every policy, since waiting can even
  raise what a cache can achieve (a turn that ends later shortens the gap
  before its conversation's next turn). In practice the runs' bounds differ
  in the third decimal.

``parley+belady`` is Parley's placement on caches that evict the entry needed
farthest ahead: it knows the future as the bound does but obeys every limit of
the fleet, so on its own timeline the best possible lies between its hit rate
and its bound.

Run: `python -m bench.router_sim [--trace steady|bursty|both --conversations N --replicas R
--cache-tokens C --tight-cache-tokens C2]`: each trace on the fleet's cache, then on a smaller one.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.router_traces import SYSTEM_TOKENS, Conversation, bursty, physical_limit, prompt_tokens, steady
from parley.partitioning import partition_for
from streams.placement import Placement, Replica

TRACES = {"steady": steady, "bursty": bursty}


@dataclass
class Sim:
    replicas: int
    slots: int  # concurrent requests per replica
    cache_tokens: int  # prefix-cache capacity per replica
    evict: str = "lru"  # or "belady": drop what is needed farthest ahead (knows the future; a yardstick)
    prefill_per_s: float = 4000.0  # uncached prompt tokens per second
    decode_per_s: float = 40.0  # reply tokens per second per request

    caches: list[OrderedDict[str, int]] = field(init=False)  # conversation → tokens cached, system prompt apart
    used: list[int] = field(init=False)
    busy: list[int] = field(init=False)
    queues: list[list[tuple[float, Conversation, int]]] = field(init=False)
    next_use: dict[str, float] = field(init=False)  # when a conversation's next turn arrives (belady only)

    def __post_init__(self) -> None:
        self.caches = [OrderedDict() for _ in range(self.replicas)]
        self.used = [0] * self.replicas
        self.busy = [0] * self.replicas
        self.queues = [[] for _ in range(self.replicas)]
        self.next_use = {}

    def cached(self, replica: int, conversation: str, prompt: int) -> int:
        """The system prompt is cached everywhere, once (a radix cache shares it); the conversation if held."""
        return min(prompt, SYSTEM_TOKENS + self.caches[replica].get(conversation, 0))

    def store(self, replica: int, conversation: str, tokens: int) -> None:
        cache = self.caches[replica]
        self.used[replica] += tokens - cache.pop(conversation, 0)
        cache[conversation] = tokens
        while self.used[replica] > self.cache_tokens and cache:
            if self.evict == "lru":
                _, dropped = cache.popitem(last=False)
            else:
                victim = max(cache, key=lambda c: self.next_use.get(c, math.inf))
                dropped = cache.pop(victim)
            self.used[replica] -= dropped

    def load(self, replica: int) -> int:
        return self.busy[replica] + len(self.queues[replica])


Policy = Callable[[Sim, str, int], int]  # (sim, conversation id, prompt tokens) → replica


def round_robin() -> Policy:
    counter = itertools.count()
    return lambda sim, conversation, prompt: next(counter) % sim.replicas


def random_choice(seed: int) -> Policy:
    rng = random.Random(seed)
    return lambda sim, conversation, prompt: rng.randrange(sim.replicas)


def least_loaded() -> Policy:
    return lambda sim, conversation, prompt: min(range(sim.replicas), key=lambda r: (sim.load(r), r))


def sticky_hash() -> Policy:
    return lambda sim, conversation, prompt: partition_for(conversation, sim.replicas)


def parley() -> Policy:
    placement = Placement()

    def choose(sim: Sim, conversation: str, prompt: int) -> int:
        replicas = []
        for r in range(sim.replicas):
            placement.heartbeat(str(r))  # the simulator knows loads exactly: no estimate needed
            replicas.append(Replica(str(r), (r,), sim.load(r)))
        decision = placement.place(conversation, replicas)
        assert decision is not None
        return decision.partition

    return choose


def greedy_cache() -> Policy:
    return lambda sim, conversation, prompt: max(
        range(sim.replicas), key=lambda r: (sim.cached(r, conversation, prompt), -sim.load(r), -r)
    )


POLICIES: dict[str, Callable[[int], Policy]] = {
    "round-robin": lambda seed: round_robin(),
    "random": random_choice,
    "least-loaded": lambda seed: least_loaded(),
    "sticky-hash": lambda seed: sticky_hash(),
    "parley": lambda seed: parley(),
    "greedy-cache": lambda seed: greedy_cache(),
}


@dataclass
class Result:
    hit_rate: float
    bound: float  # capacity bound on this run's timeline
    imbalance: float  # busiest replica's work / the mean
    wait_p99: float
    waited: float  # share of turns that queued at all


Gap = tuple[float, float, int]  # (previous turn ended, this turn began, the most of its prefix one replica holds)


def simulate(
    policy: Policy, trace: list[Conversation], replicas: int, slots: int, cache_tokens: int, evict: str = "lru"
) -> Result:
    sim = Sim(replicas, slots, cache_tokens, evict)
    events: list[tuple[float, int, str, Conversation, int]] = []
    seq = itertools.count()
    for conv in trace:
        heapq.heappush(events, (conv.start, next(seq), "arrive", conv, 0))
    cached_total = 0
    work = [0.0] * replicas
    waits: list[float] = []
    placed: dict[tuple[str, int], tuple[int, int]] = {}  # (conversation, turn) → (replica, prompt)
    began: dict[tuple[str, int], float] = {}
    ended: dict[tuple[str, int], float] = {}

    def begin(now: float, r: int, conv: Conversation, k: int, queued_at: float) -> None:
        nonlocal cached_total
        prompt = placed[conv.id, k][1]
        hit = sim.cached(r, conv.id, prompt)
        cached_total += hit
        seconds = (prompt - hit) / sim.prefill_per_s + conv.turns[k].reply_tokens / sim.decode_per_s
        work[r] += seconds
        waits.append(now - queued_at)
        began[conv.id, k] = now
        sim.next_use[conv.id] = math.inf  # the prefixes held so far are used up: this turn stores a longer one
        sim.busy[r] += 1
        heapq.heappush(events, (now + seconds, next(seq), "finish", conv, k))

    while events:
        now, _, kind, conv, k = heapq.heappop(events)
        if kind == "arrive":
            prompt = conv.prompt(k)
            r = policy(sim, conv.id, prompt)
            placed[conv.id, k] = (r, prompt)
            if sim.busy[r] < sim.slots:
                begin(now, r, conv, k, now)
            else:
                sim.queues[r].append((now, conv, k))
        else:
            r, prompt = placed[conv.id, k]
            sim.busy[r] -= 1
            ended[conv.id, k] = now
            if k + 1 < len(conv.turns):
                sim.next_use[conv.id] = now + conv.turns[k].think_s
                heapq.heappush(events, (now + conv.turns[k].think_s, next(seq), "arrive", conv, k + 1))
            sim.store(r, conv.id, prompt + conv.turns[k].reply_tokens - SYSTEM_TOKENS)
            if sim.queues[r]:
                queued_at, nxt, nk = sim.queues[r].pop(0)
                begin(now, r, nxt, nk, queued_at)
    gaps = [
        (ended[conv.id, k - 1], began[conv.id, k], min(conv.history(k), cache_tokens))
        for conv in trace
        for k in range(1, len(conv.turns))
    ]
    turns = sum(len(conv.turns) for conv in trace)
    total = prompt_tokens(trace)
    bound = (turns * SYSTEM_TOKENS + capacity_bound(gaps, replicas * cache_tokens)) / total
    waits.sort()
    return Result(
        cached_total / total,
        bound,
        max(work) / statistics.mean(work),
        waits[int(0.99 * (len(waits) - 1))],
        sum(w > 0 for w in waits) / len(waits),
    )


def capacity_bound(gaps: list[Gap], capacity: int) -> int:
    """Most prefix tokens a cache of ``capacity`` tokens could carry across ``gaps`` (module docstring).

    Gaps in order of their end; each keeps as much of its prefix as the fullest
    moment of its span leaves room for. Spans are half-open, [end, start).
    """
    times = sorted({t for a, b, _ in gaps for t in (a, b)})
    slot = {t: i for i, t in enumerate(times)}
    held = _Peaks(max(1, len(times) - 1))  # entry i: tokens held during [times[i], times[i+1])
    kept = 0
    for a, b, size in sorted(gaps, key=lambda g: g[1]):
        lo, hi = slot[a], slot[b] - 1
        x = min(size, capacity - held.peak(lo, hi))
        if x > 0:
            held.add(lo, hi, x)
            kept += x
    return kept


class _Peaks:
    """Add to a range of slots, ask a range's maximum: a segment tree with lazy adds."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.top = [0] * (4 * n)  # max over the node's range, its own pending add included
        self.extra = [0] * (4 * n)  # added to the node's whole range, not yet pushed to its children

    def add(self, lo: int, hi: int, x: int, node: int = 1, left: int = 0, right: int = -1) -> None:
        right = self.n - 1 if right < 0 else right
        if hi < left or right < lo:
            return
        if lo <= left and right <= hi:
            self.top[node] += x
            self.extra[node] += x
            return
        mid = (left + right) // 2
        self.add(lo, hi, x, 2 * node, left, mid)
        self.add(lo, hi, x, 2 * node + 1, mid + 1, right)
        self.top[node] = max(self.top[2 * node], self.top[2 * node + 1]) + self.extra[node]

    def peak(self, lo: int, hi: int, node: int = 1, left: int = 0, right: int = -1) -> int:
        right = self.n - 1 if right < 0 else right
        if hi < left or right < lo:
            return 0
        if lo <= left and right <= hi:
            return self.top[node]
        mid = (left + right) // 2
        below = max(self.peak(lo, hi, 2 * node, left, mid), self.peak(lo, hi, 2 * node + 1, mid + 1, right))
        return below + self.extra[node]


def report(name: str, trace: list[Conversation], args: argparse.Namespace, cache_tokens: int) -> None:
    turns = [len(c.turns) for c in trace]
    limit = physical_limit(trace)
    print(
        f"\ntrace {name}: {len(trace)} conversations, {sum(turns)} turns (longest {max(turns)}); fleet: "
        f"{args.replicas} replicas x {args.slots} slots, prefix cache {cache_tokens} tokens each; "
        f"physical limit {limit:.3f}"
    )
    runs = [(policy, make, "lru") for policy, make in POLICIES.items()]
    runs.append(("parley+belady", POLICIES["parley"], "belady"))
    results = {
        label: simulate(make(args.seed), trace, args.replicas, args.slots, cache_tokens, evict)
        for label, make, evict in runs
    }
    base = results["least-loaded"].wait_p99
    print(
        f"{'policy':14s} {'hit rate':>8s} {'/limit':>6s} {'bound':>6s} {'/bound':>6s} "
        f"{'imbalance':>9s} {'waited':>6s} {'wait p99':>8s} {'/least-loaded':>13s}"
    )
    for label, r in results.items():
        versus = f"{r.wait_p99 / base:13.2f}" if base else f"{'-':>13s}"
        print(
            f"{label:14s} {r.hit_rate:8.3f} {r.hit_rate / limit:6.3f} {r.bound:6.3f} {r.hit_rate / r.bound:6.3f} "
            f"{r.imbalance:9.2f} {r.waited:6.1%} {r.wait_p99:7.2f}s {versus}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", choices=[*TRACES, "both"], default="both")
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--cache-tokens", type=int, default=60_000)
    parser.add_argument("--tight-cache-tokens", type=int, default=20_000, help="a second run where the cache binds")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(
        "bound: capacity bound on the run's own timeline; /limit, /bound: hit rate over each; waited: turns "
        "that queued; parley+belady: Parley's placement on caches that evict knowing the future"
    )
    for cache_tokens in dict.fromkeys([args.cache_tokens, args.tight_cache_tokens]):
        for name in TRACES if args.trace == "both" else [args.trace]:
            report(name, TRACES[name](args.conversations, args.seed), args, cache_tokens)


if __name__ == "__main__":
    main()
