"""Summaries through the real stack: the context builder (a faust subprocess) on the real Kafka and
Cassandra asks a real CPU engine (synthetic backend, a subprocess) for the summary of dropped turns.

One long conversation moves its window once, and its summary is written once: beside the turns,
never waited for (review H8), as the window nears the move, and appended with the conversation's
next event; from the turn that has it on, every prompt carries it (the turns before it was ready go
without). An edit before the summarised part gets prompts without it; a restarted builder finds it in
the ``summaries`` table (written by the materializer) and does not ask for it again. No timing
assertions: generous deadlines only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from parley.kafka import EventProducer
from parley.settings import CassandraSettings, KafkaSettings
from schemas import events as ev
from streams.context import layout
from streams.context_tokens import TokenCounter
from streams.prompt import SUMMARY_HEADER, choose_window
from streams.settings import ContextSettings
from streams.tree import branch, fold
from tests.integration.test_engine import start_engine
from tests.integration.test_streams_pipeline import DEADLINE, SYSTEM, Tail, Worker, worker_env

SETTINGS = {
    "PARLEY_CONTEXT_TOKENIZER": "words",  # the synthetic engine's tokenizer
    "PARLEY_CONTEXT_BUDGET_TOKENS": "600",
    "PARLEY_CONTEXT_SUMMARY_TOKENS": "80",
    "PARLEY_CONTEXT_DROP_FRACTION": "0.5",
}
CFG = ContextSettings(
    system_prompt=SYSTEM, tokenizer="words", budget_tokens=600, summary_tokens=80, drop_fraction=0.5
)


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    yield from start_engine("--backend", "synthetic", "--synthetic-ttft-ms", "10", "--synthetic-tokens-per-s", "2000")


@dataclass
class Stack:
    kafka: KafkaSettings
    cassandra: CassandraSettings
    session: Any
    env: dict[str, str]
    tmp: Path
    workers: dict[str, Worker]

    def start(self, name: str, log: str) -> None:
        self.workers[name] = Worker(name, self.env, self.tmp / log)


@pytest.fixture(scope="module")
def stack(kafka: KafkaSettings, cassandra: Any, cassandra_settings: CassandraSettings, engine: str, tmp_path_factory: Any) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("summary")
    env = worker_env(kafka, cassandra_settings.keyspace, f"sum-{uuid.uuid4().hex[:6]}.", tmp / "faust")
    env |= SETTINGS | {"PARLEY_CONTEXT_SUMMARY_URL": engine}
    s = Stack(kafka, cassandra_settings, cassandra, env, tmp, {})
    s.start("context", "context.log")
    s.start("materializer", "materializer.log")
    try:
        yield s
    finally:
        for w in s.workers.values():
            w.stop()


def _turn(cid: str, n: int, parent: str | None, question: str | None = None) -> list[ev.Event]:
    mid, rid = str(uuid.uuid4()), str(uuid.uuid4())
    common = {"conversation_id": cid, "user_id": "u-sum"}
    return [
        ev.MessagePosted(**common, message_id=mid, parent_id=parent, client_message_id=f"c{n}", content=question or f"question {n}: tell me about item {n} please"),
        ev.GenerationRequested(**common, request_id=rid, parent_id=mid, client_message_id=f"c{n}"),
        ev.GenerationCompleted(**common, request_id=rid, parent_id=mid, finish_reason="stop", content=f"answer {n}: " + "item is fine and well " * 4),
    ]


def _conversation(cid: str) -> tuple[list[ev.Event], int]:
    """Turns up to the first window move and three more (checked, with the builder's own pure core, not to move again)."""
    counter = TokenCounter.from_spec("words")
    shape = layout(CFG, summaries=True)
    events: list[ev.Event] = [ev.ConversationCreated(conversation_id=cid, user_id="u-sum")]
    parent, bounds, first_move = None, [], 0
    for n in range(1, 60):
        turn = _turn(cid, n, parent)
        events += turn
        window = choose_window(branch(fold(events[:-1]), turn[1].parent_id), shape, counter)
        bounds.append(window.boundary)
        parent = turn[1].request_id  # type: ignore[attr-defined]
        if window.boundary and not first_move:
            first_move = n
        if first_move and n == first_move + 3:
            break
    assert first_move > 2 and len(set(bounds[first_move - 1 :])) == 1, bounds  # exactly one move
    return events, first_move


def _summary_in(req: ev.InferenceRequested) -> str | None:
    found = [m.content for m in req.messages if m.role == "system" and m.content.startswith(SUMMARY_HEADER)]
    return found[0] if found else None


def test_one_summary_is_written_reused_dropped_on_an_edit_and_found_after_a_restart(stack: Stack) -> None:
    cid = str(uuid.uuid4())
    events, first_move = _conversation(cid)
    requests = [e for e in events if isinstance(e, ev.GenerationRequested)]
    log, inference = Tail(stack.kafka, "chat.events"), Tail(stack.kafka, "chat.inference")
    producer = EventProducer(stack.kafka)
    workers = list(stack.workers.values())
    def send(batch: list[ev.Event]) -> None:
        """As in life: a reply completes only after its prompt was built (a builder that loads the
        conversation cold from Cassandra skips a request the rows already show answered)."""
        for e in batch:
            if isinstance(e, ev.GenerationCompleted):
                inference.wait(
                    lambda evs, r=e.request_id: any(isinstance(x, ev.InferenceRequested) and x.request_id == r for _, x in evs),
                    "the turn's prompt",
                    workers,
                )
            producer.produce_sync(e)

    def built(rid: str) -> ev.InferenceRequested:
        inference.wait(lambda evs: any(isinstance(e, ev.InferenceRequested) and e.request_id == rid for _, e in evs), "the turn's prompt", workers)
        return next(e for _, e in inference.events() if isinstance(e, ev.InferenceRequested) and e.request_id == rid)

    def summaries() -> list[ev.SummaryWritten]:
        return [e for _, e in log.events() if isinstance(e, ev.SummaryWritten) and e.conversation_id == cid]

    try:
        send(events)
        want = {g.request_id for g in requests}
        inference.wait(lambda evs: want <= {e.request_id for _, e in evs if isinstance(e, ev.InferenceRequested)}, "every turn built", workers)
        # The builder appends a summary written in the background with the conversation's next event: a
        # rename stands in for one while it is still being written.
        deadline = time.monotonic() + DEADLINE
        while not summaries():
            assert time.monotonic() < deadline, stack.workers["context"].tail()
            producer.produce_sync(ev.ConversationRenamed(conversation_id=cid, user_id="u-sum", title="nudge"))
            round_ends = time.monotonic() + 3.0  # then nudge again
            log.wait(lambda evs: bool(summaries()) or time.monotonic() > round_ends, "the summary", workers)
        by_request = {e.request_id: e for _, e in inference.events() if isinstance(e, ev.InferenceRequested) and e.conversation_id == cid}
        summary = summaries()[0]  # the move's (the next move's, written as the window nears it, may follow)
        assert summary.content and summary.model.startswith("parley-synthetic") and summary.tokens > 0
        shown = [_summary_in(by_request[g.request_id]) for g in requests]
        assert shown[: first_move - 1] == [None] * (first_move - 1)
        later = shown[first_move - 1 :]  # none while it was written, then it
        assert later == [None] * later.count(None) + [SUMMARY_HEADER + summary.content] * (len(later) - later.count(None))
        assert all(by_request[g.request_id].prompt_tokens <= CFG.budget_tokens for g in requests)
        # A regenerate of the last reply (the same window): its prompt carries the summary.
        regen = ev.GenerationRequested(conversation_id=cid, user_id="u-sum", request_id=str(uuid.uuid4()), parent_id=requests[-1].parent_id, client_message_id="regen-1")
        send([regen])
        assert _summary_in(built(regen.request_id)) == SUMMARY_HEADER + summary.content

        # An edit of the second question: its branch forks before the summarised part.
        first_reply = requests[0].request_id
        assert first_reply in summary.covered_message_ids and requests[1].parent_id in summary.covered_message_ids
        edit = _turn(cid, 100, first_reply, question="an edited second question")
        send(edit)
        rid = edit[1].request_id  # type: ignore[attr-defined]
        inference.wait(lambda evs: any(isinstance(e, ev.InferenceRequested) and e.request_id == rid for _, e in evs), "the edit's turn", workers)
        [edited] = [e for _, e in inference.events() if isinstance(e, ev.InferenceRequested) and e.request_id == rid]
        assert _summary_in(edited) is None
        assert [m.content for m in edited.messages][-2:] == [events[3].content, "an edited second question"]  # type: ignore[attr-defined]

        # The materializer stored the summary; a restarted builder (cold) reuses it from the table.
        deadline = time.monotonic() + DEADLINE
        q = f"SELECT summary_id, content FROM {stack.cassandra.keyspace}.summaries WHERE conversation_id = %s"
        while not list(stack.session.execute(q, (uuid.UUID(cid),))):
            assert time.monotonic() < deadline, stack.workers["materializer"].tail()
            time.sleep(0.5)
        stack.workers["context"].stop()
        stack.start("context", "context-restarted.log")
        # A regenerate of the last reply: the same branch as the last turn, so the window stays where
        # it was (one more new turn here would move it again and rightly extend the summary).
        last = requests[-1]
        rid = str(uuid.uuid4())
        regens = [
            ev.GenerationRequested(conversation_id=cid, user_id="u-sum", request_id=rid, parent_id=last.parent_id, client_message_id="regen"),
        ]
        workers = list(stack.workers.values())
        send(regens)
        inference.wait(lambda evs: any(isinstance(e, ev.InferenceRequested) and e.request_id == rid for _, e in evs), "a turn after the restart", workers)
        [after] = [e for _, e in inference.events() if isinstance(e, ev.InferenceRequested) and e.request_id == rid]
        assert _summary_in(after) == SUMMARY_HEADER + summary.content
        # Anything the builder wrote for that turn is on the log before this marker (same partition, acked first).
        marker = ev.ConversationRenamed(conversation_id=cid, user_id="u-sum", title="marker")
        producer.produce_sync(marker)
        log.wait(lambda evs: any(e.event_id == marker.event_id for _, e in evs), "the log read past the turn", workers)
        ids = [e.summary_id for e in summaries()]
        assert ids.count(summary.summary_id) == 1 and len(set(ids)) == len(ids)  # none written twice
    finally:
        producer.close()
        log.close()
        inference.close()
