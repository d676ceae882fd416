"""Analysts on the real stack: a scripted session (edits, a regenerate, a stop, an escalation, a shed
turn) replays into exactly the turns that happened, twice identically; a window replay starts at the
offsets a timestamp lookup gives; the report's numbers are the replay file's; archive → retention →
replay across the boundary has no gap and no duplicate; rebuild from archive + log equals the live
keyspace row by row. One stack of its own (admission tuned so a free burst is shed); real processes,
broker, database and HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from parley.cassandra import connect
from parley.partitioning import partition_for
from parley.settings import CassandraSettings, KafkaSettings, from_env
from parley.consumer import watermarks
from schemas.catalog import TOPICS
from schemas.events import ExperimentArm, ExperimentStarted
from streams import experiments
from tools import isolated
from tools.analysts import archive, counterfactual, digest, rebuild, replay, report, turns
from tools.analysts.location import Location
from tools.client import ApiError, ParleyClient, parse_sse
from tools.topology import CHAT_PATH

ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "60",
    "PARLEY_CONTEXT_MAX_TOKENS": "48",
    "PARLEY_WORKER_HEARTBEAT_S": "0.5",
    # Any load at all sheds a free turn (paid turns never): a burst of free turns sheds all but the first.
    "PARLEY_ROUTER_BUSY": "0.001",
    "PARLEY_ROUTER_QUEUE_LIMIT": "0.001",
    "PARLEY_ROUTER_PAID_LIMIT": "1000",
    "PARLEY_ROUTER_RETRY_AFTER_S": "1",
}
CODE = "Why does this fail?\n```python\ndef f(x):\n    return x/0\n```"  # the classifier's medium
DEADLINE = 60.0


@dataclass
class Seen:
    """A turn as the client saw it."""

    reply_id: str
    conversation_id: str
    user_message_id: str
    text: str  # what the user sent
    kind: str = "message"
    finish_reason: str = ""
    streamed: str = ""
    usage: dict = field(default_factory=dict)
    shed: bool = False


@dataclass
class Session:
    stack: isolated.IsolatedStack
    seen: dict[str, Seen]
    mid_ms: int  # between the two halves of the session
    ids: dict[str, str]  # name → reply id
    first_conversation: str


def _seen(events: list, cid: str, text: str, kind: str = "message") -> Seen:
    head = next(e.data for e in events if e.event == "message")
    final = events[-1]
    s = Seen(head["reply_id"], cid, head["user_message_id"], text, kind)
    s.streamed = "".join(e.data.get("text", "") for e in events if e.event == "delta")
    if final.event == "done":
        s.finish_reason, s.usage = final.data["finish_reason"], final.data["usage"]
    else:
        assert final.event == "error" and final.data["code"] == "overloaded", final.data
        s.finish_reason, s.shed = "rejected", True
    return s


async def _send(client: ParleyClient, cid: str, text: str, **kw) -> Seen:
    return _seen([e async for e in client.stream_message(cid, text, **kw)], cid, text)


async def _stop_mid_stream(client: ParleyClient, cid: str, text: str) -> Seen:
    events = []
    async for event in client.stream_message(cid, text):
        events.append(event)
        if event.event == "delta" and sum(e.event == "delta" for e in events) == 1:
            r = await client._http.post(f"/v1/messages/{events[0].data['reply_id']}/stop")
            assert r.status_code == 200
    return _seen(events, cid, text)


async def _regenerate(client: ParleyClient, cid: str, reply_id: str, text: str) -> Seen:
    async with client._http.stream("POST", f"/v1/messages/{reply_id}/regenerate", json={"client_message_id": uuid.uuid4().hex}) as r:
        assert r.status_code == 200
        events = [e async for e in parse_sse(r.aiter_lines())]
    return _seen(events, cid, text, "regenerate")


async def _shed_burst(stack: isolated.IsolatedStack, seen: dict[str, Seen]) -> None:
    """Free turns at once until one is shed by the router (the gateway may refuse some first: 503, no turn)."""
    clients = [ParleyClient(stack.url, stack.create_user("free", "free")[1]) for _ in range(4)]
    try:
        for _ in range(10):
            cids = [await c.create_conversation() for c in clients]
            outcomes = await asyncio.gather(*(_send(c, cid, "hi, quick one") for c, cid in zip(clients, cids)), return_exceptions=True)
            for o in outcomes:
                if isinstance(o, ApiError):
                    assert o.status == 503, o
                elif isinstance(o, BaseException):
                    raise o
                else:
                    seen[o.reply_id] = o
            if any(s.shed for s in seen.values()):
                return
            await asyncio.sleep(1.5)  # let the heartbeats show an idle pool again
        pytest.fail("no free turn was shed in 10 bursts")
    finally:
        for c in clients:
            await c.close()


async def _script(stack: isolated.IsolatedStack) -> Session:
    client = ParleyClient(stack.url, stack.create_user("analyst", "plus")[1])
    seen: dict[str, Seen] = {}
    ids: dict[str, str] = {}
    try:
        a = await client.create_conversation("analysts a")
        for name, coro in (
            ("first", _send(client, a, "Hello there, who are you?")),
            ("second", _send(client, a, "Tell me about event sourcing")),
        ):
            s = await coro
            seen[s.reply_id], ids[name] = s, s.reply_id
        s = await _regenerate(client, a, ids["second"], "Tell me about event sourcing")
        seen[s.reply_id], ids["regenerated"] = s, s.reply_id
        s = await _send(client, a, "Hello there, edited", parent_id=None)  # an edit of the first message
        seen[s.reply_id], ids["edited"] = s, s.reply_id
        b = await client.create_conversation("analysts b")
        s = await _stop_mid_stream(client, b, "Tell me a long story")
        seen[s.reply_id], ids["stopped"] = s, s.reply_id
        s = await _send(client, b, CODE)
        seen[s.reply_id], ids["escalated"] = s, s.reply_id
        await asyncio.sleep(1.5)
        mid_ms = int(time.time() * 1000)
        await asyncio.sleep(1.5)
        await _shed_burst(stack, seen)
        c = await client.create_conversation("analysts c")
        s = await _send(client, c, "One more question")
        seen[s.reply_id], ids["last"] = s, s.reply_id
    finally:
        await client.close()
    return Session(stack, seen, mid_ms, ids, a)


@pytest.fixture(scope="module")
def session(infra, tmp_path_factory) -> Iterator[Session]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "analysts")
    stack = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("analysts-logs"), ENV, CHAT_PATH)
    try:
        # The analyst's (plus) turns run in an experiment of two arms that change nothing (the routing asserted
        # below is the router's own); the free users' turns are in none. The gateway reads it within a poll.
        started = _cli(["experiments", "start", "e2e", "--arm", "a:0.5", "--arm", "b:0.5", "--tier", "plus"], kafka, cassandra)
        assert "started e2e" in started.stdout
        time.sleep(1.5)
        yield _in_thread(asyncio.run, _script(stack))
    finally:
        stack.stop()
        isolated.drop(kafka, cassandra)


def _in_thread(fn, *args):  # type: ignore[no-untyped-def]
    """Run ``fn`` (which starts its own event loop) off this thread, leaving pytest-asyncio's loop alone."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def _replay_all(kafka: KafkaSettings, want: set[str]) -> replay.Result:
    """A replay once every served turn's UsageRecorded is in (workers write it just after the reply ends)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        result = replay.replay(kafka, replay.Query())
        got = {t.request_id: t for t in result.turns}
        served = [t for t in got.values() if t.finish_reason in ("stop", "length", "cancelled")]
        if want <= set(got) and all(t.ttft_ms is not None for t in served):
            return result
        assert time.monotonic() < deadline, f"turns missing from the log: {want - set(got)}"
        time.sleep(0.5)


def _cli(args: list[str], kafka: KafkaSettings, cassandra: CassandraSettings) -> subprocess.CompletedProcess:
    env = {**os.environ, "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap, "PARLEY_TOPIC_PREFIX": kafka.topic_prefix,
           "PARLEY_KEYSPACE": cassandra.keyspace}
    done = subprocess.run([str(Path(sys.executable).parent / "parley"), *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_the_session_replays_into_exactly_its_turns_reports_and_rebuilds(session: Session, tmp_path: Path) -> None:
    kafka, cassandra = session.stack.kafka, session.stack.cassandra
    seen, ids = session.seen, session.ids
    assert any(s.shed for s in seen.values()) and seen[ids["stopped"]].finish_reason == "cancelled"

    # ---- 1. a full replay: exactly the turns that happened, with the right fields; no consumer group touched
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    groups_before = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    full = _replay_all(kafka, set(seen))
    groups_after = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    assert not {g for g in groups_after - groups_before if g.startswith("parley-analysts")}, "replay joined no group"
    got = {t.request_id: t for t in full.turns}
    assert set(got) == set(seen), "no turn missing, none invented"
    for rid, s in seen.items():
        t = got[rid]
        assert (t.conversation_id, t.user_message_id, t.kind, t.finish_reason) == (s.conversation_id, s.user_message_id, s.kind, s.finish_reason)
        assert t.user_message == s.text and t.prompt[-1] == {"role": "user", "content": s.text}
        assert t.attempts == 1 and t.pool and t.model and t.shed == s.shed
        if s.shed:
            assert (t.error_code, t.content, t.cache, t.ttft_ms, t.route_reason) == ("overloaded", "", None, None, "")
            continue
        assert t.content == s.streamed
        assert (t.prompt_tokens, t.cached_tokens, t.completion_tokens) == (
            s.usage["prompt_tokens"], s.usage["cached_tokens"], s.usage["completion_tokens"])
        assert t.cache == ("hit" if t.cached_tokens > 0 else "miss") and t.replica and t.ttft_ms > 0 and t.route_reason
    assert got[ids["second"]].prompt[:-1] != [] and got[ids["regenerated"]].user_message_id == got[ids["second"]].user_message_id
    assert got[ids["edited"]].user_parent_id is None and got[ids["second"]].user_parent_id == ids["first"]
    assert (got[ids["escalated"]].pool, got[ids["escalated"]].route_reason) == ("medium", "escalated")
    assert any(t.cache == "hit" for t in got.values()), "later turns of a conversation reuse its prefix"
    # Every plus turn carries the experiment and the analyst's one arm (by user); the free turns none.
    arms = {(t.tier, t.experiment, t.arm) for t in got.values()}
    analyst = next(t.user_id for t in got.values() if t.tier == "plus")
    arm = experiments.assign(ExperimentStarted(experiment="e2e", arms=[ExperimentArm(name="a", share=0.5),
                                                                       ExperimentArm(name="b", share=0.5)]), analyst).name  # fmt: skip
    assert arms == {("plus", "e2e", arm), ("free", None, None)}

    # ---- a second replay (through the CLI) writes the identical file
    first_file = tmp_path / "turns.jsonl"
    replay.write([t.to_record() for t in full.turns], first_file)
    _cli(["replay", str(tmp_path / "again.jsonl")], kafka, cassandra)
    assert (tmp_path / "again.jsonl").read_bytes() == first_file.read_bytes()

    # ---- 2. a window: only its turns, and the read starts where the timestamp lookup says
    window = replay.replay(kafka, replay.Query(since_ms=session.mid_ms, lead_s=0.5))
    in_window = {rid for rid, t in got.items() if t.requested_at >= session.mid_ms * 1000}
    assert {t.request_id for t in window.turns} == in_window and 0 < len(in_window) < len(got)
    assert all(t == got[t.request_id] for t in window.turns)
    probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused-" + uuid.uuid4().hex})
    try:
        since = session.mid_ms - 500
        for topic in turns.TOPICS:
            tps = [TopicPartition(kafka.topic(topic), p, since) for p in range(TOPICS[topic].partitions)]
            for tp in probe.offsets_for_times(tps, timeout=10):
                st = window.stats.partitions[(topic, tp.partition)]
                high = watermarks(probe, TopicPartition(tp.topic, tp.partition), 10)[1]
                assert st.kafka_start == (tp.offset if tp.offset >= 0 else high), (topic, tp.partition)
                assert st.first_offset is None or st.first_offset == st.kafka_start
        home = window.stats.partitions[("chat.events", partition_for(session.first_conversation, TOPICS["chat.events"].partitions))]
        assert home.kafka_start > 0, "the first conversation's events lie before the window: not read"
    finally:
        probe.close()
    assert window.stats.records < full.stats.records

    # ---- 3. the report's numbers are the replay file's
    _cli(["report", str(first_file), "--out", str(tmp_path / "report")], kafka, cassandra)
    numbers = json.loads((tmp_path / "report" / "report.json").read_text())
    for name in numbers["charts"]:
        assert (tmp_path / "report" / name).read_bytes()[:4] == b"\x89PNG"
    records = replay.load(first_file)
    for row in numbers["ttft"]:
        values = [r["ttft_ms"] for r in records if (r["model"], r["cache"]) == (row["model"], row["cache"]) and r["ttft_ms"] is not None]
        assert [row["p50"], row["p95"], row["p99"]] == pytest.approx(list(np.percentile(values, [50, 95, 99])))
        assert numbers["charts"]["ttft_by_model_cache.png"]["p95"][f"{row['model']}\n{row['cache']}"] == row["p95"]
    assert numbers["shed_rate"] > 0 and numbers["shed_rate"] == pytest.approx(np.mean([r["shed"] for r in records]))
    assert numbers["charts"]["routing_mix.png"]["share of turns"]["shed"] == numbers["shed_rate"]
    assert numbers["turns"] == len(records) and "## Time to first token" in (tmp_path / "report" / "report.md").read_text()
    placed = [r for r in records if r["route_reason"]]
    assert numbers["routing_mix"] == pytest.approx({p: sum(r["pool"] == p for r in placed) / len(placed) for p in {r["pool"] for r in placed}})
    # The experiment's report: its turns, by arm, through the CLI.
    shown = _cli(["report", str(first_file), "--experiment", "e2e", "--out", str(tmp_path / "exp")], kafka, cassandra).stdout
    compared = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert shown.startswith("# Experiment e2e") and compared["arms"] == {arm: sum(r["tier"] == "plus" for r in records)}
    assert "e2e" in _cli(["experiments", "list"], kafka, cassandra).stdout
    # Counterfactual: with the same settings, the router's policy re-run chooses the pools it logged.
    same = counterfactual.settings_with({})
    c = counterfactual.compare(records, same, same, report.DEFAULT_PRICES)
    assert c.baseline.pools == c.logged.pools and c.baseline.escalations == c.logged.escalations == 1

    # ---- 4. archive the first half, let "retention" delete it from Kafka, replay across the boundary
    live = _settled_digest(cassandra, set(seen))
    location = Location(str(tmp_path / "cold"))
    made = archive.archive(kafka, location, session.mid_ms)
    assert made.records["chat.events"] > 0 and made.files
    assert archive.archive(kafka, location, session.mid_ms).files == [], "archiving again copies nothing"
    _delete_archived(kafka, location)
    kafka_only = replay.replay(kafka, replay.Query())
    assert len(kafka_only.turns) < len(full.turns), "the first half is gone from Kafka"
    across = replay.replay(kafka, replay.Query(), location=location)
    assert across.turns == full.turns
    parts = across.stats.partitions.values()
    assert sum(p.archive_records for p in parts) > 0 and sum(p.kafka_records for p in parts) > 0
    assert all(p.duplicates == 0 and p.holes == 0 for p in parts), [vars(p) for p in parts if p.duplicates or p.holes]
    for p in parts:
        if p.archive_records and p.kafka_records:
            # Kafka's part starts right after the archive's last record: at the next offset, or one past
            # a transaction's commit marker there (it takes an offset, and is never delivered).
            assert 1 <= p.first_kafka_offset - archive.segments(location, p.topic)[p.partition][-1].last <= 2

    # ---- 5. rebuild from archive + log into an empty keyspace: row for row the live one
    target = replace(cassandra, keyspace=f"{cassandra.keyspace}_rebuilt")
    try:
        built = _in_thread(rebuild.rebuild, kafka, target, location)
        assert built.events > 0 and built.invalid == 0
        session_ = connect(cassandra)
        try:
            rebuilt = digest.keyspace_digest(session_, target.keyspace)
            for table in digest.PROJECTED:
                if rebuilt[table] != live[table]:
                    diff = digest.diff(digest.read_rows(session_, cassandra.keyspace, table), digest.read_rows(session_, target.keyspace, table))
                    pytest.fail(f"{table} differs: {diff}")
            assert live["messages"].rows == 2 * len(seen) - 1  # a reply each, a user message each but the regenerate's
            with pytest.raises(rebuild.KeyspaceNotEmpty):
                rebuild.prepare(target)
        finally:
            session_.cluster.shutdown()
    finally:
        s = connect(cassandra)
        try:
            s.execute(f"DROP KEYSPACE IF EXISTS {target.keyspace}", timeout=60)
        finally:
            s.cluster.shutdown()


def _settled_digest(cassandra: CassandraSettings, reply_ids: set[str]) -> dict[str, digest.TableDigest]:
    """The live keyspace's digest once the materializer wrote every reply's end (and nothing changes any more)."""
    session = connect(cassandra)
    deadline = time.monotonic() + DEADLINE
    try:
        previous = None
        while True:
            rows = digest.read_rows(session, cassandra.keyspace, "messages")
            final = {str(r["message_id"]) for r in rows if r["status"] not in (None, "streaming")}
            current = digest.keyspace_digest(session, cassandra.keyspace)
            if reply_ids <= final and current == previous:
                return current
            assert time.monotonic() < deadline, f"replies not materialised: {reply_ids - final}"
            previous = current
            time.sleep(1.0)
    finally:
        session.cluster.shutdown()


def _delete_archived(kafka: KafkaSettings, location: Location) -> None:
    """What retention would do once the archive holds them: delete the archived records from the brokers."""
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    upto = [
        TopicPartition(kafka.topic(topic), p, segs[-1].last + 1)
        for topic in archive.DEFAULT_TOPICS
        for p, segs in archive.segments(location, topic).items()
    ]
    for fut in client.delete_records(upto, operation_timeout=30).values():
        fut.result()
