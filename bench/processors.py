"""One processor instance's throughput: chat.events per second through the context builder and the materializer.

One isolated namespace (tools/isolated.py: prefixed topics, its own keyspace and
consumer groups) on the running Kafka and Cassandra. The sample log
(``tools.analysts.sample``: posts, regenerations, cancels, sheds) is produced
first; then one instance of each processor, as a process started the way
`parley run` starts it (faust, its lanes, the real store), reads it from the
start, alone: the context builder first (so it finds no rows and builds every
turn's prompt, loading each conversation once, as a fresh instance does), then
the materializer. An instance's rate is the chat.events records its group
committed between the first commit seen and the last (start-up and the group
join left out), over that time; its CPU is the process's, over the same time.

The baseline, in the same run on the same records: a bare confluent-kafka read
of chat.events (assign, poll, no decode: what the log gives any reader here),
and ``parley rebuild`` of the same log into a scratch keyspace (the
materializer's projection and writes without faust, batched per partition:
the ceiling of the same work). The two instances' rates go to
``bench/results/processors.json``: ``parley capacity`` sizes processors by them.

Beside them, with no stack, the context builder's cost of counting one long
prompt (``prompt_counting``): from its messages' cached counts, as the builder
counts (streams/context_tokens.py), against the baseline of tokenising the
rendered prompt whole, as it did on every turn before.

Run: `python -m bench.processors [--conversations N] [--turns T]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.load import cpu_seconds
from bench.replay import produce, raw_rate
from bench.results import record, this_command
from parley.ops import Ops
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.analysts import rebuild, sample
from tools.topology import CONTEXT, MATERIALIZER, Service

#: The long prompt ``prompt_counting`` counts: messages of about this many words.
COUNTED_MESSAGES, COUNTED_WORDS = 200, 120

TOPIC = "chat.events"
POLL_S = 0.2


@dataclass(frozen=True)
class Run:
    records: int  # chat.events records committed between the first commit seen and the last
    seconds: float
    cores: float  # the process's CPU over those seconds

    @property
    def per_s(self) -> float:
        return self.records / self.seconds


def _committed(ops: Ops, group: str, topic: str) -> int:
    return sum(o or 0 for (t, _), o in ops.committed(group).items() if t == topic)


def instance_rate(kafka: KafkaSettings, cassandra: CassandraSettings, service: Service, logs: Path, timeout_s: float) -> Run:
    """One instance of ``service`` reading ``chat.events`` from the start until its group has committed the end."""
    ops = Ops(kafka)
    topic = kafka.topic(TOPIC)
    end = sum(ops.end_offsets(ops.partitions_of([topic])).values())
    group = f"{kafka.topic_prefix}{service.group}"  # isolated stacks prefix processor groups with the topic prefix
    stack = isolated.start(kafka, cassandra, logs, services=(service,))
    try:
        pid = stack.supervisor.children[0].process.pid
        deadline = time.monotonic() + timeout_s
        first: tuple[float, int, float] | None = None
        while True:
            done, now, cpu = _committed(ops, group, topic), time.monotonic(), cpu_seconds(pid)
            if first is None and done > 0:
                first = (now, done, cpu)
            if done >= end:
                break
            if now > deadline:
                raise SystemExit(f"{service.name} committed {done:,} of {end:,} records in {timeout_s:.0f} s")
            time.sleep(POLL_S)
    finally:
        stack.stop()
    assert first is not None
    began, at_first, cpu_first = first
    seconds = max(now - began, POLL_S)
    return Run(end - at_first, seconds, (cpu - cpu_first) / seconds)


def prompt_counting(repeats: int = 20) -> tuple[float, float]:
    """(ms counting a long prompt from cached message counts, ms tokenising it whole), with the CPU engine's tokenizer."""
    from schemas.events import PromptMessage
    from streams.context_tokens import TokenCounter

    counter = TokenCounter.from_spec("smollm2")
    words = "the quick brown fox jumps over the lazy dog while counting tokens".split()
    messages = [
        PromptMessage(role="user" if i % 2 == 0 else "assistant", content=" ".join(words[(i + j) % len(words)] for j in range(COUNTED_WORDS)) + f" {i}")
        for i in range(COUNTED_MESSAGES)
    ]
    counter.prompt(messages)  # the earlier turns counted every message but the newest: the cache holds them

    def per_call_ms(count: object) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            count()  # type: ignore[operator]
        return (time.perf_counter() - started) * 1000 / repeats

    cached = per_call_ms(lambda: counter.prompt(messages))
    whole = per_call_ms(lambda: counter.count(counter.template.render_prompt(messages)))
    return cached, whole


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds an instance may take to read the log")
    args = parser.parse_args()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "benchproc")
    scratch = replace(cassandra, keyspace=f"{cassandra.keyspace}_rebuild")
    try:
        sent = sample.session(args.conversations, args.turns)
        produce(kafka, sent)
        events = sum(s.topic == TOPIC for s in sent)
        print(f"log: {events:,} chat.events records ({args.conversations:,} conversations × {args.turns} turns)", flush=True)
        raw = raw_rate(kafka, (TOPIC,), events, connected=True)
        with tempfile.TemporaryDirectory() as logs:
            runs = {s.name: instance_rate(kafka, cassandra, s, Path(logs), args.timeout) for s in (CONTEXT, MATERIALIZER)}
        ceiling = rebuild.rebuild(kafka, scratch)
        cached_ms, whole_ms = prompt_counting()
        for name, run in runs.items():
            print(f"{name}, one instance: {run.per_s:,.0f} chat.events records/s ({run.records:,} in {run.seconds:.1f} s), "
                  f"{run.cores:.2f} cores", flush=True)
        print(f"baseline: bare read of chat.events (no decode) {raw:,.0f} records/s; parley rebuild (the same projection, "
              f"no faust, batched) {ceiling.events_per_s:,.0f} events/s")
        print(f"materializer / rebuild ratio: {runs['materializer'].per_s / ceiling.events_per_s:.2f}; "
              f"context / bare read ratio: {runs['context'].per_s / raw:.3f}")
        print(f"counting a prompt of {COUNTED_MESSAGES} messages: {cached_ms:.2f} ms from cached message counts; "
              f"baseline, tokenised whole: {whole_ms:.2f} ms")
        record(
            "processors",
            {
                "context_events_per_s": runs["context"].per_s, "context_cores": runs["context"].cores,
                "materializer_events_per_s": runs["materializer"].per_s, "materializer_cores": runs["materializer"].cores,
                "log_records": events, "context_prompt_count_ms": cached_ms,
            },
            baseline={
                "raw_read_events_per_s": raw, "rebuild_events_per_s": ceiling.events_per_s, "context_prompt_count_whole_ms": whole_ms,
            },
            command=this_command(),
        )
    finally:
        isolated.drop(kafka, scratch)
        isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
