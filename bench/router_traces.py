"""Chat traces for bench.router_sim, and the physical limit of a trace's prefix-cache hit rate.

A trace fixes what the users do: when each conversation starts, the tokens of
every question and reply, and how long the user reads and types after each
reply. It does not fix when later turns arrive: turn k+1 is sent ``think_s``
seconds after reply k has finished (a closed loop, as in a chat window), so a
user is never two turns ahead of the fleet and every turn's prompt is the
whole conversation so far, whatever the policy did.

Two shapes, both printed by ``python -m bench.router_sim``:

- ``steady``: the trace Parley's placement thresholds were chosen on. Uniform
  conversation starts, Pareto turn counts, made-up token and think times.
- ``bursty``: one they were not chosen on, built from published workload
  statistics (sources and the parts that are assumptions at ``bursty``):
  Gamma inter-arrival times (BurstGPT), a mean of 2.0 turns per conversation
  (LMSYS-Chat-1M) with a power-law tail, so most conversations are one turn
  and a few run past fifty.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass

SYSTEM_TOKENS = 200  # shared by every prompt: always cached, on every replica


@dataclass(frozen=True)
class Turn:
    user_tokens: int
    reply_tokens: int
    think_s: float  # after this turn's reply, before the user sends the next turn


@dataclass(frozen=True)
class Conversation:
    id: str
    start: float  # when its first turn arrives
    turns: tuple[Turn, ...]

    def history(self, index: int) -> int:
        """Tokens of the conversation before turn ``index`` (system prompt excluded): its cacheable prefix."""
        return sum(t.user_tokens + t.reply_tokens for t in self.turns[:index])

    def prompt(self, index: int) -> int:
        return SYSTEM_TOKENS + self.history(index) + self.turns[index].user_tokens


def steady(conversations: int, seed: int) -> list[Conversation]:
    rng = random.Random(seed)
    trace = []
    for c in range(conversations):
        start = rng.uniform(0, conversations * 0.2)  # ~5 new conversations a second
        count = min(60, int(rng.paretovariate(1.3)))  # long tail: most short, a few very long
        turns = []
        for _ in range(count):
            user, reply = rng.randint(10, 120), rng.randint(40, 400)
            turns.append(Turn(user, reply, rng.expovariate(1 / 20.0) + 10.0))  # reading and typing
        trace.append(Conversation(f"c{c}", start, tuple(turns)))
    return trace


# BurstGPT (Wang et al. 2024, arXiv:2401.17644) fits the inter-arrival times of
# ChatGPT conversation requests with a Gamma distribution; shape 0.5 is the
# default of its own synthetic generator (BurstGPT-Perf, RunConfig.gamma_shape),
# not a fit we re-derived from the trace: a coefficient of variation of
# sqrt(2), where Poisson arrivals have 1. We apply it to conversation starts.
BURST_SHAPE = 0.5
# LMSYS-Chat-1M (Zheng et al. 2023, arXiv:2309.11998, Table 1) reports 2.0 turns
# per conversation on average, 69.5 tokens per user prompt and 214.5 per reply.
# Only those means are published there. The shape is our assumption: a zeta
# (discrete power-law) turn count, P(n) ~ n^-2.393, truncated at 128 turns
# (~36k tokens of context at those means); 2.393 makes the truncated mean 2.0.
# So 72% of conversations are a single turn, ~0.8% reach 20 turns, ~0.2% 50.
TURNS_EXPONENT, MAX_TURNS = 2.393, 128
USER_TOKENS_MEAN, REPLY_TOKENS_MEAN = 69.5, 214.5
# Assumptions too: token counts exponential around those means, and think time
# lognormal with a 20 s median and sigma 1 (a few seconds to several minutes).
THINK_MEDIAN_S, THINK_SIGMA = 20.0, 1.0
_TURNS_CDF = list(itertools.accumulate(n**-TURNS_EXPONENT for n in range(1, MAX_TURNS + 1)))


def bursty(conversations: int, seed: int, rate: float = 7.4) -> list[Conversation]:
    """``rate`` new conversations a second on average, in Gamma bursts.

    7.4 offers the fleet as many turns as ``steady`` does: 5 conversations a
    second of 2.96 turns (the mean of its capped Pareto) is 14.8 turns a second.
    """
    rng = random.Random(seed)
    trace, start = [], 0.0
    for c in range(conversations):
        start += rng.gammavariate(BURST_SHAPE, 1 / (rate * BURST_SHAPE))
        count = 1 + bisect.bisect_left(_TURNS_CDF, rng.random() * _TURNS_CDF[-1])
        turns = tuple(
            Turn(
                max(1, round(rng.expovariate(1 / USER_TOKENS_MEAN))),
                max(1, round(rng.expovariate(1 / REPLY_TOKENS_MEAN))),
                rng.lognormvariate(0.0, THINK_SIGMA) * THINK_MEDIAN_S,
            )
            for _ in range(count)
        )
        trace.append(Conversation(f"c{c}", start, turns))
    return trace


def prompt_tokens(trace: list[Conversation]) -> int:
    return sum(conv.prompt(k) for conv in trace for k in range(len(conv.turns)))


def physical_limit(trace: list[Conversation]) -> float:
    """The hit rate if every token ever computed for the conversation, and the system prompt, were cached.

    An infinite cache with perfect affinity: each turn finds the system prompt
    and the whole conversation before it, and computes only its new question.
    Nothing can do better, since those new tokens were never seen before; sticky
    placement onto caches that never evict reaches it, however long turns wait.
    """
    cached = sum(SYSTEM_TOKENS + conv.history(k) for conv in trace for k in range(len(conv.turns)))
    return cached / prompt_tokens(trace)
