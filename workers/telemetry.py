"""The worker's Prometheus series: what one finished generation adds (parley/metrics.py defines them)."""

from __future__ import annotations

from parley.metrics import INTER_TOKEN, QUEUE_DEPTH, REPLIES, RUNNING, TOKENS, TTFT, cache_outcome
from workers.outcome import Outcome


def record_outcome(outcome: Outcome, *, pool: str, model: str, new_tokens: int) -> None:
    """TTFT and inter-token latency by pool, model and cache outcome; tokens and finish reasons.

    ``new_tokens`` are the tokens this attempt generated (a resumed attempt's earlier text was
    counted by the attempt that made it). Replies that never produced a token add no latency.
    """
    REPLIES.labels(pool, model, outcome.finish_reason).inc()
    if new_tokens <= 0 or outcome.ttft_ms <= 0:
        return
    cache = cache_outcome(outcome.usage.cached_tokens, outcome.usage.prompt_tokens)
    TOKENS.labels(pool, model).inc(new_tokens)
    TTFT.labels(pool, model, cache).observe(outcome.ttft_ms / 1000)
    if new_tokens > 1 and outcome.duration_ms > outcome.ttft_ms:
        gap_s = (outcome.duration_ms - outcome.ttft_ms) / 1000 / (new_tokens - 1)
        INTER_TOKEN.labels(pool, model, cache).observe(gap_s)


def record_load(*, pool: str, worker: str, queued: int, running: int) -> None:
    QUEUE_DEPTH.labels(pool, worker).set(queued)
    RUNNING.labels(pool, worker).set(running)
