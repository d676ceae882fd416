"""Checkpoints, stop and branches through the real processors (faust subprocesses) on Kafka + Cassandra.

The materializer (with its checkpoints agent) and the context builder run for
the whole module. Tests produce like the gateway and the worker would (chunks
to ``chat.tokens``, completions to ``chat.events``) and wait, with generous
deadlines and no timing assertions, for what the tables and topics must show.
"""

from __future__ import annotations

import time
import uuid
from schemas.sealing import cell_at, open_text
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from parley.cassandra import connect
from parley.kafka import EventProducer
from parley.migrate import migrate
from parley.settings import CassandraSettings, KafkaSettings
from schemas import events as ev
from tests.integration.test_streams_pipeline import DEADLINE, SYSTEM, Tail, Worker, lag, snapshot, worker_env

T = TypeVar("T")
USER = f"u-ck-{uuid.uuid4().hex[:6]}"  # the keyspace is shared with other modules: this module's rows are this user's
MATERIALIZER_ENV = {"PARLEY_MATERIALIZER_CHECKPOINT_MIN_S": "0.5", "PARLEY_MATERIALIZER_CHECKPOINT_MAX_S": "1.0"}


@dataclass
class Stack:
    kafka: KafkaSettings
    cassandra: CassandraSettings
    session: Any
    producer: EventProducer
    prefix: str
    workers: dict[str, Worker]
    tmp: Path

    def send(self, *events: ev.Event) -> None:
        for e in events:
            self.producer.produce_sync(e)

    def wait(self, probe: Callable[[], T | None], what: str) -> T:
        """``probe()``'s first truthy answer; fails with the processors' logs after the deadline."""
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            dead = [w for w in self.workers.values() if w.proc.poll() is not None]
            assert not dead, "\n".join(f"{w.log.name} exited:\n{w.tail()}" for w in dead)
            time.sleep(0.2)
        logs = "\n".join(f"--- {w.log.name}\n{w.tail()}" for w in self.workers.values())
        raise AssertionError(f"timed out waiting for {what}; last answer {probe()!r}\n{logs}")

    def row(self, cid: str, mid: str) -> Any:
        q = f"SELECT content, status, finish_reason, role, tokens, writetime(content) AS wt FROM {self.cassandra.keyspace}.messages WHERE conversation_id = %s AND message_id = %s"
        row = self.session.execute(q, (uuid.UUID(cid), uuid.UUID(mid))).one()
        return None if row is None else row._replace(content=open_text(row.content, at=cell_at("messages", "content", uuid.UUID(mid))))  # sealed at rest (DESIGN.md §12)

    def leaf(self, cid: str) -> str | None:
        q = f"SELECT selected_leaf_id FROM {self.cassandra.keyspace}.conversations WHERE conversation_id = %s"
        r = self.session.execute(q, (uuid.UUID(cid),)).one()
        return None if r is None or r.selected_leaf_id is None else str(r.selected_leaf_id)


@pytest.fixture(scope="module")
def stack(kafka: KafkaSettings, cassandra: Any, cassandra_settings: CassandraSettings, tmp_path_factory: Any) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("checkpoints")
    prefix = f"ck-{uuid.uuid4().hex[:6]}."
    env = worker_env(kafka, cassandra_settings.keyspace, prefix, tmp / "faust") | MATERIALIZER_ENV
    workers = {name: Worker(name, env, tmp / f"{name}.log") for name in ("context", "materializer")}
    producer = EventProducer(kafka)
    try:
        yield Stack(kafka, cassandra_settings, cassandra, producer, prefix, workers, tmp)
    finally:
        producer.close()
        for w in workers.values():
            w.stop()


# ------------------------------------------------------------------ a conversation as the gateway and worker write it


class Conv:
    def __init__(self, user: str = USER) -> None:
        self.cid, self.user = str(uuid.uuid4()), user
        self.common = {"conversation_id": self.cid, "user_id": user}

    def created(self) -> ev.ConversationCreated:
        return ev.ConversationCreated(**self.common, title="t")

    def post(self, content: str, parent: str | None, client: str) -> ev.MessagePosted:
        return ev.MessagePosted(**self.common, message_id=str(uuid.uuid4()), parent_id=parent, client_message_id=client, content=content)

    def ask(self, parent: str, client: str) -> ev.GenerationRequested:
        return ev.GenerationRequested(**self.common, request_id=str(uuid.uuid4()), parent_id=parent, client_message_id=client)


class Stream:
    """A worker's chunks of one reply, then its completion and final chunk (in the worker's order)."""

    def __init__(self, asked: ev.GenerationRequested) -> None:
        self.asked, self.seq, self.text = asked, 0, ""

    def chunk(self, text: str) -> ev.TokenChunk:
        c = ev.TokenChunk(
            conversation_id=self.asked.conversation_id, user_id=self.asked.user_id, request_id=self.asked.request_id,
            seq=self.seq, text=text, tokens=1, offset_chars=len(self.text),
        )
        self.seq, self.text = self.seq + 1, self.text + text
        return c

    def end(self, reason: str = "stop", content: str | None = None) -> tuple[ev.GenerationCompleted, ev.TokenChunk]:
        a = self.asked
        done = ev.GenerationCompleted(
            conversation_id=a.conversation_id, user_id=a.user_id, request_id=a.request_id, parent_id=a.parent_id,
            finish_reason=reason, content=self.text if content is None else content, usage=ev.Usage(completion_tokens=self.seq),
        )
        final = ev.TokenChunk(
            conversation_id=a.conversation_id, user_id=a.user_id, request_id=a.request_id, seq=self.seq,
            offset_chars=len(self.text), finish_reason=reason,
        )
        return done, final


def _open(stack: Stack, conv: Conv) -> ev.GenerationRequested:
    m = conv.post("tell me a story", None, "c1")
    g = conv.ask(m.message_id, "c1")
    stack.send(conv.created(), m, g)
    return g


# ------------------------------------------------------------------ checkpoints


def test_a_streaming_reply_is_checkpointed_as_it_grows_and_the_completion_wins(stack: Stack) -> None:
    conv = Conv()
    g = _open(stack, conv)
    s = Stream(g)
    words = [f"word{i} " for i in range(40)]
    stack.send(*(s.chunk(w) for w in words[:10]))
    full = "".join(words)

    def partial(longer_than: int) -> Any:
        r = stack.row(conv.cid, g.request_id)
        return r if r is not None and r.content and len(r.content) > longer_than and r.status == "streaming" else None

    first = stack.wait(lambda: partial(0), "a first checkpoint")
    assert full.startswith(first.content) and first.role == "assistant"
    stack.send(*(s.chunk(w) for w in words[10:]))
    grown = stack.wait(lambda: partial(len(first.content)), "a longer checkpoint")
    assert full.startswith(grown.content) and grown.tokens >= 1
    stack.wait(lambda: partial(len(full) - 1), "the checkpoint of every chunk")  # pending text is written by the timer

    done, final = s.end()
    stack.send(done, final)
    row = stack.wait(lambda: (r := stack.row(conv.cid, g.request_id)) is not None and r.status == "complete" and r, "the completion")
    assert (row.content, row.finish_reason, row.wt) == (full, "stop", done.occurred_at)


def test_a_checkpoint_processed_after_the_completion_loses_to_it(stack: Stack) -> None:
    conv = Conv()
    g = _open(stack, conv)
    s = Stream(g)
    late = s.chunk("only the beginning")  # stamped by the worker before it completed the reply
    s.text += " and the rest, which no chunk here carries"
    done, _ = s.end()
    stack.send(done)  # the completion is materialized first; the checkpoint comes after it
    stack.wait(lambda: (r := stack.row(conv.cid, g.request_id)) is not None and r.status == "complete", "the completion")
    stack.send(late)
    # A sentinel reply in the same conversation (same partition, after the late chunk): once its
    # checkpoint is in, the late chunk's checkpoint (written at once, as a reply's first) is too.
    sentinel = Stream(conv.ask(g.parent_id, "regen"))
    stack.send(sentinel.asked, sentinel.chunk("sentinel"))
    stack.wait(lambda: (r := stack.row(conv.cid, sentinel.asked.request_id)) is not None and r.content == "sentinel", "the sentinel's checkpoint")
    row = stack.row(conv.cid, g.request_id)
    assert (row.content, row.status, row.wt) == (s.text, "complete", done.occurred_at)


def test_a_stopped_reply_is_stored_cancelled_with_its_partial_text(stack: Stack) -> None:
    conv = Conv()
    g = _open(stack, conv)
    s = Stream(g)
    stack.send(s.chunk("Once upon "), s.chunk("a time"))
    stack.wait(lambda: (r := stack.row(conv.cid, g.request_id)) is not None and r.content == "Once upon a time", "the checkpoint")
    done, final = s.end("cancelled")
    stack.send(done, final)
    row = stack.wait(lambda: (r := stack.row(conv.cid, g.request_id)) is not None and r.status == "cancelled" and r, "the cancellation")
    assert (row.content, row.finish_reason) == ("Once upon a time", "cancelled")


# ------------------------------------------------------------------ branches through the context builder


def test_regenerate_edit_and_leaf_selection_build_prompts_from_their_branch_only(stack: Stack) -> None:
    inference = Tail(stack.kafka, "chat.inference")
    workers = list(stack.workers.values())

    def prompt(request_id: str) -> list[str]:
        inference.wait(lambda evs: any(getattr(e, "request_id", None) == request_id for _, e in evs), f"prompt {request_id}", workers)
        [req] = [e for _, e in inference.events() if getattr(e, "request_id", None) == request_id]
        assert req.messages[0].content == SYSTEM
        return [m.content for m in req.messages[1:]]

    try:
        conv = Conv()
        g1 = _open(stack, conv)
        m1 = g1.parent_id
        assert prompt(g1.request_id) == ["tell me a story"]
        stack.send(Stream(g1).end(content="first answer")[0])
        regen = conv.ask(m1, "regenerate-1")  # POST /v1/messages/{g1}/regenerate: a new reply to the same question
        stack.send(regen)
        assert prompt(regen.request_id) == ["tell me a story"]  # a new request, without the first answer
        stack.send(Stream(regen).end(content="second answer")[0])
        edit = conv.post("tell me a poem", None, "c2")  # an edit of m1: under m1's parent (the root)
        edit_reply = conv.ask(edit.message_id, "c2")
        stack.send(edit, edit_reply)
        assert prompt(edit_reply.request_id) == ["tell me a poem"]
        stack.wait(lambda: stack.leaf(conv.cid) == edit_reply.request_id, "the leaf at the edit's reply")

        stack.send(ev.LeafSelected(**conv.common, leaf_id=regen.request_id))
        stack.wait(lambda: stack.leaf(conv.cid) == regen.request_id, "the leaf back on the regenerated reply")
        m2 = conv.post("go on", regen.request_id, "c3")
        g2 = conv.ask(m2.message_id, "c3")
        stack.send(m2, g2)
        assert prompt(g2.request_id) == ["tell me a story", "second answer", "go on"]
        stack.wait(lambda: stack.leaf(conv.cid) == g2.request_id, "the leaf at the new turn")
        ks = stack.cassandra.keyspace
        parents = {
            str(r.message_id): str(r.parent_id) if r.parent_id else None
            for r in stack.session.execute(f"SELECT message_id, parent_id FROM {ks}.messages WHERE conversation_id = %s", (uuid.UUID(conv.cid),))
        }
        assert parents == {
            m1: None, g1.request_id: m1, regen.request_id: m1,
            edit.message_id: None, edit_reply.request_id: edit.message_id,
            m2.message_id: regen.request_id, g2.request_id: m2.message_id,
        }
    finally:
        inference.close()


# ------------------------------------------------------------------ replay (runs last: it replays what the tests above wrote)


def test_replaying_events_and_tokens_into_an_empty_keyspace_gives_the_same_rows(stack: Stack) -> None:
    conv = Conv()
    g = _open(stack, conv)
    unfinished = Stream(g)  # a reply still streaming: only its checkpoints hold its text
    stack.send(*(unfinished.chunk(f"w{i} ") for i in range(5)))
    stack.wait(lambda: (r := stack.row(conv.cid, g.request_id)) is not None and r.content == unfinished.text, "the unfinished reply's text")
    live_group = f"{stack.prefix}streams.materializer"
    stack.wait(lambda: lag(stack.kafka, live_group, "chat.events") + lag(stack.kafka, live_group, "chat.tokens") == 0, "the live materializer caught up")

    session, ks = stack.session, stack.cassandra.keyspace
    live = snapshot(session, ks)
    mine = {r[0] for r in live["conversations"] if r[1] == USER}
    assert len(mine) == 5  # one per test of this module
    replay_ks = f"{ks}_ckreplay"
    admin = connect(stack.cassandra)
    migrate(admin, replay_ks, stack.cassandra.replication)
    try:
        for n in range(2):  # the second pass replays over the first one's rows
            prefix = f"ckreplay{n}-{uuid.uuid4().hex[:6]}."
            env = worker_env(stack.kafka, replay_ks, prefix, stack.tmp / f"faust-replay{n}") | MATERIALIZER_ENV
            w = Worker("materializer", env, stack.tmp / f"replay{n}.log")
            group = f"{prefix}streams.materializer"

            def rebuilt() -> bool:
                assert w.proc.poll() is None, f"replay {n} exited\n{w.tail()}"
                caught_up = lag(stack.kafka, group, "chat.events") + lag(stack.kafka, group, "chat.tokens") == 0
                return caught_up and snapshot(session, replay_ks, only=mine) == snapshot(session, ks, only=mine)

            try:
                stack.wait(rebuilt, f"replay {n} to catch up and match the live rows")
            finally:
                w.stop()
        assert snapshot(session, replay_ks, only=mine) == snapshot(session, ks, only=mine)
        assert snapshot(session, ks) == live  # the live keyspace was never touched by the replays
    finally:
        admin.execute(f"DROP KEYSPACE IF EXISTS {replay_ks}", timeout=60)
        admin.cluster.shutdown()
