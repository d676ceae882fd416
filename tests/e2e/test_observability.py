"""Telemetry that tells the truth (issue 7): every service's /metrics after real turns, the client's own
TTFT, one trace id from the HTTP request through every event, and no message text in any log or metric.

One stack of its own: the cache-hit and cache-miss turns must be the first ones its engine sees.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from tools import isolated
from tools.client import ParleyClient

ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "400",
    "PARLEY_LOG_LEVEL": "DEBUG",  # the most the services ever log: the canary must be in none of it
}


@pytest.fixture(scope="module")
def observed(infra, tmp_path_factory) -> Iterator[isolated.IsolatedStack]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "obs")
    stack = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("obs-logs"), ENV)
    try:
        yield stack
    finally:
        stack.stop()
        isolated.drop(kafka, cassandra)


def scrape(stack: isolated.IsolatedStack) -> dict[str, str]:
    out = {}
    for child in stack.supervisor.children:
        assert child.metrics_url, f"{child.service.name} exposes no /metrics"
        response = httpx.get(child.metrics_url, timeout=10)
        assert response.status_code == 200, (child.service.name, response.status_code)
        out[child.service.name] = response.text
    return out


def total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    found = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            found += float(m.group(2))
    return found


def events_with(kafka: KafkaSettings, topic: str, request_id: str) -> list:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"obs-{uuid.uuid4().hex[:6]}"})
    consumer.assign([TopicPartition(kafka.topic(topic), p, OFFSET_BEGINNING) for p in range(TOPICS[topic].partitions)])
    found, idle = [], 0
    try:
        while idle < 3:
            batch = consumer.consume(500, 1.0)
            idle = idle + 1 if not batch else 0
            for msg in batch:
                if msg.error() or msg.value() is None:
                    continue
                event = codec.decode(msg.value())
                rid = getattr(event, "request_id", None) or getattr(getattr(event, "request", None), "request_id", None)
                if rid == request_id:
                    found.append(event)
    finally:
        consumer.close()
    return found


async def test_metrics_trace_ids_and_no_message_text_anywhere(observed: isolated.IsolatedStack) -> None:
    canary = f"CANARY{uuid.uuid4().hex}"
    trace = f"trace-{uuid.uuid4().hex[:12]}"
    _, key = observed.create_user("observer", "plus")
    client = ParleyClient(observed.url, key)
    try:
        cid = await client.create_conversation()
        opening = f"{canary} " + " ".join(f"word{i}" for i in range(80))  # long and new: a cache miss
        first = await client.send(cid, opening, headers={"X-Request-ID": trace})
        assert first.final is not None and first.final.event == "done"
        second = await client.send(cid, f"and {canary} again")  # the first turn is its cached prefix: a hit
        assert second.final is not None and second.final.event == "done"
        assert second.final.data["usage"]["cached_tokens"] * 2 >= second.final.data["usage"]["prompt_tokens"]
        # A flagged turn: its text must stay out of the logs and metrics too (moderation logs only ids).
        flagged = await client.send(cid, f"{canary}: I am going to kill you tonight, you worthless idiot.")
        assert flagged.final is not None and flagged.final.data["finish_reason"] == "content_filter", flagged.final
        async with httpx.AsyncClient(base_url=observed.url, headers={"Authorization": f"Bearer {key}"}) as http:
            told = await http.post("/v1/telemetry", json={"ttft_ms": 321.5, "client": "web"})
            assert told.status_code == 204, told.text
            assert (await http.post("/v1/telemetry", json={"ttft_ms": "fast"})).status_code == 422
            memory = await http.put("/v1/memory", json={"facts": [f"my name is {canary}"]})
            assert memory.status_code == 200, memory.text
    finally:
        await client.close()

    time.sleep(2)  # not an assertion: heartbeats refresh the gauges
    metrics = scrape(observed)
    worker_text = "\n".join(t for name, t in metrics.items() if name.startswith("worker-"))
    assert total(worker_text, "parley_ttft_seconds_count", cache="miss") >= 1
    assert total(worker_text, "parley_ttft_seconds_count", cache="hit") >= 1
    assert total(worker_text, "parley_inter_token_seconds_count") >= 2
    assert total(worker_text, "parley_generated_tokens_total") > 0
    assert "parley_worker_queue_depth" in worker_text and "parley_worker_running" in worker_text
    assert "parley_consumer_lag{" in worker_text
    assert total(metrics["router"], "parley_admission_decisions_total", where="router") >= 2
    assert total(metrics["router"], "parley_routes_total") >= 2
    for processor in ("context", "router", "materializer"):
        assert "parley_consumer_lag{" in metrics[processor], processor
        assert "parley_dead_letters_total" in metrics[processor] or "parley_dead_letters" in metrics[processor]
    moderation = metrics["moderation"]
    assert total(moderation, "parley_moderation_checks_total", direction="input", verdict="flagged") >= 1
    assert total(moderation, "parley_moderation_checks_total", direction="output", verdict="clean") >= 1
    assert total(moderation, "parley_moderation_flags_total", direction="input", action="cut") >= 1
    assert total(moderation, "parley_moderation_check_seconds_count") >= 3
    gateway = metrics["gateway"]
    assert total(gateway, "parley_gateway_ttft_seconds_count") >= 2
    assert total(gateway, "parley_client_ttft_seconds_count", client="web") == 1
    assert abs(total(gateway, "parley_client_ttft_seconds_sum", client="web") - 0.3215) < 1e-6
    assert total(gateway, "parley_http_requests_total", route="/v1/conversations/{conversation_id}/messages", status="200") >= 2

    # One trace id from the HTTP request through every event of the turn.
    # The caller's X-Request-ID is in it, after a part of the gateway's own (a caller cannot choose another's).
    reply_id = first.head["reply_id"]
    traces = set()
    for topic in ("chat.events", "chat.inference", "chat.tokens", "chat.usage"):
        events = events_with(observed.kafka, topic, reply_id)
        assert events, f"no event of the first turn on {topic}"
        traces |= {e.trace_id for e in events}
    (traced,) = traces
    assert traced.endswith(f"-{trace}") and traced != trace
    logged = {p.name: p.read_text(errors="replace") for p in observed.supervisor.log_dir.glob("*.log")}
    assert any(traced in text for name, text in logged.items() if name.startswith("worker-")), "the worker logs the trace id"

    # Privacy: the canary is in the log (Kafka) and the database, and nowhere else.
    for name, text in logged.items():
        assert canary not in text, f"message text in {name}"
    for name, text in metrics.items():
        assert canary not in text, f"message text in the metrics of {name}"
