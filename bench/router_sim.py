"""Placement policies on a simulated fleet: prefix-cache hit rate, load imbalance, queue wait.

A discrete-event simulation, so the figures are the same on any machine: a
fleet of replicas, each with a prefix cache (LRU over conversations, finite
token capacity) and a fixed number of concurrent slots, fed a multi-turn chat
trace (long-tailed turn counts, think time between turns, prompts that grow
with the conversation and share a system prompt). Every policy sees the same
trace. Parley's policy is ``streams.placement.Placement``, the code the router
runs; the oracle knows every replica's cache and picks the longest cached
prefix, ties to the least loaded.

Run: `python -m bench.router_sim [--conversations N --replicas R]`.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from parley.partitioning import partition_for
from streams.placement import Placement, Replica

SYSTEM_TOKENS = 200  # shared by every prompt: any replica that served anything has it cached


@dataclass
class Turn:
    conversation: str
    index: int
    arrival: float
    user_tokens: int
    reply_tokens: int


@dataclass
class Sim:
    replicas: int
    slots: int  # concurrent requests per replica
    cache_tokens: int  # prefix-cache capacity per replica
    prefill_per_s: float = 4000.0  # uncached prompt tokens per second
    decode_per_s: float = 40.0  # reply tokens per second per request

    caches: list[OrderedDict[str, int]] = field(init=False)
    used: list[int] = field(init=False)
    busy: list[int] = field(init=False)
    queues: list[list[tuple[float, int, Turn, int]]] = field(init=False)

    def __post_init__(self) -> None:
        self.caches = [OrderedDict() for _ in range(self.replicas)]
        self.used = [0] * self.replicas
        self.busy = [0] * self.replicas
        self.queues = [[] for _ in range(self.replicas)]

    def cached(self, replica: int, conversation: str, prompt: int) -> int:
        prefix = self.caches[replica].get(conversation, 0)
        return min(prompt, max(prefix, SYSTEM_TOKENS))

    def store(self, replica: int, conversation: str, tokens: int) -> None:
        cache = self.caches[replica]
        self.used[replica] += tokens - cache.pop(conversation, 0)
        cache[conversation] = tokens
        while self.used[replica] > self.cache_tokens and cache:
            _, dropped = cache.popitem(last=False)
            self.used[replica] -= dropped

    def load(self, replica: int) -> int:
        return self.busy[replica] + len(self.queues[replica])


Policy = Callable[[Sim, Turn, int], int]  # (sim, turn, prompt tokens) → replica


def round_robin() -> Policy:
    counter = itertools.count()
    return lambda sim, turn, prompt: next(counter) % sim.replicas


def random_choice(seed: int) -> Policy:
    rng = random.Random(seed)
    return lambda sim, turn, prompt: rng.randrange(sim.replicas)


def least_loaded() -> Policy:
    return lambda sim, turn, prompt: min(range(sim.replicas), key=lambda r: (sim.load(r), r))


def sticky_hash() -> Policy:
    return lambda sim, turn, prompt: partition_for(turn.conversation, sim.replicas)


def parley() -> Policy:
    placement = Placement()

    def choose(sim: Sim, turn: Turn, prompt: int) -> int:
        replicas = []
        for r in range(sim.replicas):
            placement.heartbeat(str(r))  # the simulator knows loads exactly: no estimate needed
            replicas.append(Replica(str(r), (r,), sim.load(r)))
        decision = placement.place(turn.conversation, replicas)
        assert decision is not None
        return decision.partition

    return choose


def oracle() -> Policy:
    return lambda sim, turn, prompt: max(
        range(sim.replicas), key=lambda r: (sim.cached(r, turn.conversation, prompt), -sim.load(r), -r)
    )


def trace(conversations: int, seed: int) -> list[Turn]:
    rng = random.Random(seed)
    turns = []
    for c in range(conversations):
        start = rng.uniform(0, conversations * 0.2)  # ~5 new conversations a second
        count = min(60, int(rng.paretovariate(1.3)))  # long tail: most short, a few very long
        t = start
        for i in range(count):
            turns.append(Turn(f"c{c}", i, t, rng.randint(10, 120), rng.randint(40, 400)))
            t += rng.expovariate(1 / 20.0) + 10.0  # reading and typing between turns
    return sorted(turns, key=lambda x: x.arrival)


@dataclass
class Result:
    hit_rate: float
    imbalance: float
    wait_p99: float


def simulate(policy: Policy, turns: list[Turn], replicas: int, slots: int, cache_tokens: int) -> Result:
    sim = Sim(replicas, slots, cache_tokens)
    history: dict[str, int] = {}  # conversation → tokens so far (its next prompt's prefix)
    events: list[tuple[float, int, str, object]] = []
    seq = itertools.count()
    for turn in turns:
        heapq.heappush(events, (turn.arrival, next(seq), "arrive", turn))
    prompt_total = cached_total = 0
    work = [0.0] * replicas
    waits: list[float] = []

    def begin(now: float, r: int, turn: Turn, prompt: int, queued_at: float) -> None:
        nonlocal prompt_total, cached_total
        hit = sim.cached(r, turn.conversation, prompt)
        prompt_total += prompt
        cached_total += hit
        seconds = (prompt - hit) / sim.prefill_per_s + turn.reply_tokens / sim.decode_per_s
        work[r] += seconds
        waits.append(now - queued_at)
        sim.busy[r] += 1
        heapq.heappush(events, (now + seconds, next(seq), "finish", (r, turn, prompt)))

    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == "arrive":
            turn = payload  # type: ignore[assignment]
            prompt = SYSTEM_TOKENS + history.get(turn.conversation, 0) + turn.user_tokens
            r = policy(sim, turn, prompt)
            if sim.busy[r] < sim.slots:
                begin(now, r, turn, prompt, now)
            else:
                sim.queues[r].append((now, next(seq), turn, prompt))
        else:
            r, turn, prompt = payload  # type: ignore[misc]
            sim.busy[r] -= 1
            total = prompt + turn.reply_tokens
            history[turn.conversation] = total - SYSTEM_TOKENS
            sim.store(r, turn.conversation, total)
            if sim.queues[r]:
                queued_at, _, nxt, nxt_prompt = sim.queues[r].pop(0)
                begin(now, r, nxt, nxt_prompt, queued_at)
    mean = statistics.mean(work)
    waits.sort()
    return Result(cached_total / prompt_total, max(work) / mean, waits[int(0.99 * (len(waits) - 1))])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--cache-tokens", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    turns = trace(args.conversations, args.seed)
    print(
        f"trace: {args.conversations} conversations, {len(turns)} turns; fleet: {args.replicas} replicas x "
        f"{args.slots} slots, prefix cache {args.cache_tokens} tokens each"
    )
    policies = {
        "round-robin": round_robin(),
        "random": random_choice(args.seed),
        "least-loaded": least_loaded(),
        "sticky-hash": sticky_hash(),
        "parley": parley(),
        "oracle": oracle(),
    }
    results = {name: simulate(p, turns, args.replicas, args.slots, args.cache_tokens) for name, p in policies.items()}
    rr, best = results["round-robin"], results["oracle"]
    print(f"{'policy':14s} {'hit rate':>9s} {'/oracle':>8s} {'/round-robin':>13s} {'imbalance':>10s} {'wait p99':>9s}")
    for name, r in results.items():
        print(
            f"{name:14s} {r.hit_rate:9.3f} {r.hit_rate / best.hit_rate:8.2f} {r.hit_rate / rr.hit_rate:13.2f} "
            f"{r.imbalance:10.2f} {r.wait_p99:8.2f}s"
        )


if __name__ == "__main__":
    main()
