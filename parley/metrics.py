"""Every Prometheus series Parley exports, in one place (docs/operations.md lists them).

Labels are ids of the deployment (pool, model, tier, topic, group), never
anything a user typed: no message text, no user or conversation ids (those
would also explode the series count).

The gateway serves ``/metrics`` on its own port; every other process calls
``serve_from_env(service)``, which starts prometheus-client's HTTP server on
``PARLEY_METRICS_PORT`` (the supervisor hands each child a port; 0 = off).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from parley.settings import TelemetrySettings, from_env

log = logging.getLogger(__name__)

#: Latency buckets from 10 ms to 30 s: TTFT of a cached small model to a cold frontier one.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
#: Inter-token gaps: 1 ms to 1 s.
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0)

# ------------------------------------------------------------------ every process without an HTTP health route

READY = Gauge(
    "parley_ready",
    "1 once this process can do its job: a processor or the document worker holds its group's assignment, a worker "
    "has sent a heartbeat after joining its group (every replica's). The supervisor's readiness check "
    "(tools/supervisor.py); 0 before",
)


class Readiness:
    """``parley_ready`` turns 1 once each of ``parts`` (a worker's replicas, say) has said so; thread-safe,
    and saying so again changes nothing."""

    def __init__(self, parts: int = 1) -> None:
        self._waiting = set(range(parts))
        self._lock = threading.Lock()
        READY.set(0)

    def ready(self, part: int = 0) -> None:
        with self._lock:
            self._waiting.discard(part)
            if not self._waiting:
                READY.set(1)


# ------------------------------------------------------------------ workers: generation

TTFT = Histogram(
    "parley_ttft_seconds",
    "Engine submission to first token, per reply (worker side)",
    ["pool", "model", "cache"],
    buckets=LATENCY_BUCKETS,
)
INTER_TOKEN = Histogram(
    "parley_inter_token_seconds",
    "Mean gap between tokens after the first, per reply (worker side)",
    ["pool", "model", "cache"],
    buckets=ITL_BUCKETS,
)
TOKENS = Counter("parley_generated_tokens", "Tokens generated; rate() is tokens per second", ["pool", "model"])
REPLIES = Counter("parley_replies", "Replies ended, by finish reason", ["pool", "model", "finish_reason"])
QUEUE_DEPTH = Gauge("parley_worker_queue_depth", "Requests accepted and waiting for an engine slot", ["pool", "worker"])
RUNNING = Gauge("parley_worker_running", "Generations running in the worker's engine", ["pool", "worker"])
TRANSACTIONS = Counter(
    "parley_worker_transactions",
    "A worker's Kafka transactions (closings and offsets): committed, aborted (fenced, or the broker away), "
    "and producers replaced (stuck in a call, or after a broker outage)",
    ["outcome"],
)

# ------------------------------------------------------------------ router, gateway

ADMISSION = Counter(
    "parley_admission_decisions", "Admission verdicts on turns", ["where", "pool", "tier", "decision"]
)
ROUTES = Counter("parley_routes", "Turns routed, by pool and reason", ["pool", "reason"])
POOL_BACKLOG = Gauge(
    "parley_pool_backlog", "Turns waiting in Kafka for a pool's workers, at the router's last backlog reading", ["pool"]
)
GATEWAY_TTFT = Histogram(
    "parley_gateway_ttft_seconds",
    "POST of a message to the first delta written to the client (gateway side; the pool is the router's choice, unknown here)",
    [],
    buckets=LATENCY_BUCKETS,
)
CLIENT_TTFT = Histogram(
    "parley_client_ttft_seconds",
    "Send to first visible token, as the web page measured it (POST /v1/telemetry)",
    ["client"],
    buckets=LATENCY_BUCKETS,
)
HTTP_REQUESTS = Counter("parley_http_requests", "Gateway responses", ["route", "method", "status"])
OPEN_STREAMS = Gauge(
    "parley_gateway_open_streams", "Reply streams (SSE) this gateway serves now: what its autoscaler targets per pod"
)
TOKEN_RECORDS_READ = Counter(
    "parley_gateway_token_records_read",
    "chat.tokens records the gateway's reader fetched and decoded, by whether the partition is this gateway's own "
    "(PARLEY_GATEWAY_SHARD) or borrowed for a stream routed elsewhere; divided by tokens streamed, the read amplification",
    ["share"],
)

# ------------------------------------------------------------------ every consumer

MODERATION_CHECKS = Counter(
    "parley_moderation_checks", "Moderation checks, by direction, stage and verdict", ["direction", "stage", "verdict"]
)
MODERATION_FLAGS = Counter(
    "parley_moderation_flags", "Categories flagged, by direction and what was done", ["category", "direction", "action"]
)
MODERATION_CHECK_SECONDS = Histogram(
    "parley_moderation_check_seconds", "Time a classifier took for one check", ["direction"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
MODERATION_CLASSIFIER_FAILURES = Counter(
    "parley_moderation_classifier_failures",
    "Tries of a moderation check that gave no verdict (each is tried again), by reason: unavailable | timeout | not_a_verdict | error",
    ["reason"],
)
MODERATION_CUT_SECONDS = Histogram(
    "parley_moderation_cut_seconds", "From a flagged reply chunk being written to the cancel that cuts it",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
MODERATION_ORG_POLICIES = Gauge(
    "parley_moderation_org_policies", "Organisations' own moderation policies in force, as last read from Cassandra"
)
MODERATION_ORG_READS = Counter(
    "parley_moderation_org_policy_reads", "Reads of organisations' moderation policies, by outcome", ["outcome"]
)
INJECTION_FLAGS = Counter("parley_injection_flags", "Retrieved passages that read as instructions, by rule", ["rule"])
DEAD_LETTERS = Counter("parley_dead_letters", "Records sent to a DLQ", ["topic", "consumer"])
PROCESSOR_RETRIES = Counter(
    "parley_processor_retries",
    "Tries of a record's handling that failed and are tried again in place (streams/handling.py), by processor and "
    "exception class: a broker or Cassandra outage, a timeout, an error of no known kind",
    ["processor", "error_type"],
)
PROCESSOR_GAVE_UP = Counter(
    "parley_processor_gave_up",
    "Records dead-lettered after an error of no known kind outlasted its retries (a bug, or an outage no one "
    "translated), by processor and exception class",
    ["processor", "error_type"],
)


def cache_outcome(cached_tokens: int, prompt_tokens: int) -> str:
    """``hit`` when the engine's prefix cache served at least half the prompt.

    Not "any cached token": the system prompt and chat template are cached
    for every request after the first, so that would call nearly every turn a
    hit. Half the prompt means the conversation's own history was found.
    """
    return "hit" if prompt_tokens > 0 and 2 * cached_tokens >= prompt_tokens else "miss"


class LagCollector(Collector):
    """``parley_consumer_lag{group,topic,partition}``, read from the broker at scrape time.

    Each process exports the lag of its own group, so a dashboard sums what it
    sees and a dead process's group still shows lag in the others' scrapes.
    """

    def __init__(self, rows: Callable[[], Iterable[tuple[str, str, int, int]]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "parley_consumer_lag", "Records not yet committed by a consumer group", labels=["group", "topic", "partition"]
        )
        try:
            for group, topic, partition, lag in self._rows():
                family.add_metric([group, topic, str(partition)], lag)
        except Exception as exc:  # a scrape must never fail on a sick broker
            log.warning("consumer lag not collected", extra={"error": type(exc).__name__})
        yield family


def serve_from_env(service: str) -> int | None:
    """Start the metrics HTTP server on ``PARLEY_METRICS_PORT``; the port, or None when off."""
    telemetry = from_env(TelemetrySettings)
    port = telemetry.metrics_port
    if port <= 0:
        return None
    start_http_server(port, addr=telemetry.metrics_host)
    log.info("metrics served", extra={"service": service, "port": port})
    return port
