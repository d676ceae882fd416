"""Outages on the real stack: a Kafka broker killed and restarted under load, Cassandra killed and
restarted while users keep chatting, an erasure whose processor is killed while Cassandra is down.

The module starts its OWN Kafka and Cassandra (infra/local, free ports, a data dir under
``.data/outage-*``) so it can kill them: the shared ones serve everyone else's tests. A whole
Parley stack (isolated.start) runs on them. Real processes, broker, database and HTTP; no timing
assertions, only deadlines that fail a test which would otherwise hang.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from infra.local import cassandra as local_cassandra
from infra.local import jvm
from infra.local import kafka as local_kafka
from infra.local import stack as local_stack
from infra.local.settings import LocalInfraSettings
from gateway.erasure import request_by_operator
from parley import keys
from parley.cassandra import DRIVER_ERRORS, connect
from parley.consumer import read_until, watermarks
from parley.keys import KeySettings
from parley.settings import REPO_ROOT, CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from schemas import sealing
from schemas.events import Event, GenerationCompleted, MessagePosted, UserErased
from schemas.sealing import cell_at, open_text
from tools import isolated
from tools.audit_sources import read_log
from tools.erasure_audit import erasure_job
from tools.supervisor import free_ports, tail
from tools.topology import ERASURE
from tools.client import ApiError, ParleyClient, SseEvent, parse_sse

DEADLINE = 120.0
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "80",  # replies last a second or two: some are always in flight
    "PARLEY_CONTEXT_MAX_TOKENS": "40",
    "PARLEY_GATEWAY_APPEND_TIMEOUT_S": "5",
    "PARLEY_GATEWAY_BROKER_PROBE_S": "0.5",
    "PARLEY_GATEWAY_RETRY_AFTER_S": "2",
    "PARLEY_GATEWAY_AUTH_CACHE_S": "5",  # expires during the Cassandra outage: the stale key must still work
}
LOCAL = {"kafka": local_kafka, "cassandra": local_cassandra}


@pytest.fixture(scope="module")
def private_infra() -> Iterator[LocalInfraSettings]:
    """A Kafka and a Cassandra of this module only; stopped and deleted at its end."""
    kafka_port, controller_port, cassandra_port, storage_port = free_ports(4)
    cfg = replace(
        from_env(LocalInfraSettings),
        data_dir=REPO_ROOT / ".data" / f"outage-{uuid.uuid4().hex[:8]}",
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        cassandra_port=cassandra_port,
        cassandra_storage_port=storage_port,
        cassandra_heap="768m",
    )
    try:
        local_stack.up(cfg, echo=lambda s: None)
        yield cfg
    finally:
        local_stack.down(cfg, echo=lambda s: None)
        shutil.rmtree(cfg.data_dir, ignore_errors=True)


def kill(cfg: LocalInfraSettings, name: str) -> None:
    """Take our private ``name`` (kafka | cassandra) away from every client.

    Kafka gets SIGKILL. Cassandra gets SIGTERM: the local node runs with
    ``-Dcassandra.unsafesystem=true`` (system tables skip the commit log, for fast
    starts), so a SIGKILL would lose the keyspace's schema, which no real cluster does.
    Clients see the same outage either way: connections closed, the port refusing.
    """
    service = LOCAL[name].service(cfg)
    pid = jvm.pid_of(service)
    assert pid is not None, f"the private {name} is not running"
    os.kill(pid, signal.SIGKILL if name == "kafka" else signal.SIGTERM)
    deadline = time.monotonic() + 30
    while jvm.pid_of(service) is not None:
        assert time.monotonic() < deadline, f"{name} (pid {pid}) survived SIGKILL"
        time.sleep(0.1)
    try:
        os.waitpid(pid, os.WNOHANG)  # ours: started by this process, so reap it
    except ChildProcessError:
        pass


def restart(cfg: LocalInfraSettings, name: str) -> None:
    """Start ``name`` again on the same data dir (idempotent when it runs)."""
    local_stack.up(cfg, echo=lambda s: None, only=(name,))


def answers_again(session: Any) -> None:
    """Wait until this process's own ``session`` is back: its driver reconnects on its own schedule,
    which can trail the services' sessions (the log this test decodes opens with keys read through it)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            session.execute("SELECT release_version FROM system.local")
            return
        except DRIVER_ERRORS:
            assert time.monotonic() < deadline, "the test's Cassandra session never reconnected"
            time.sleep(0.5)


@dataclass
class Outage:
    infra: LocalInfraSettings
    inner: isolated.IsolatedStack
    key: str

    def client(self) -> ParleyClient:
        return ParleyClient(self.inner.url, self.key, timeout=60.0)

    def children_alive(self) -> dict[str, int | None]:
        return {c.log.stem: c.process.poll() for c in self.inner.supervisor.children}


@pytest.fixture(scope="module")
def outage(private_infra: LocalInfraSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    kafka = replace(from_env(KafkaSettings), bootstrap=f"127.0.0.1:{private_infra.kafka_port}", topic_prefix="")
    cassandra = replace(from_env(CassandraSettings), hosts="127.0.0.1", port=private_infra.cassandra_port)
    kafka, cassandra = isolated.prepare(kafka, cassandra, "outage")
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("outage-logs"), ENV)
    held = sealing.installed()
    keys.install_from_env(inner.session)  # the data keys are on this Cassandra: the log the tests read opens with them
    try:
        yield Outage(private_infra, inner, inner.create_user("outage-user", "plus")[1])
    finally:
        sealing.install(held)
        inner.stop()
        inner.session.cluster.shutdown()  # type: ignore[attr-defined]


@pytest.fixture
def both_up(outage: Outage) -> Outage:
    """Each test starts with both services up, whatever an earlier test left."""
    restart(outage.infra, "kafka")
    restart(outage.infra, "cassandra")
    return outage


# ------------------------------------------------------------------ helpers


async def wait_ready(url: str, want: bool) -> dict[str, Any]:
    """Poll /readyz until it says ``want``; the body it said it with."""
    deadline = time.monotonic() + DEADLINE
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            try:
                r = await http.get(f"{url}/readyz")
                if r.json().get("ready") is want:
                    return r.json()
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"/readyz never said ready={want}"
            await asyncio.sleep(0.2)


async def stream(url: str, key: str, method: str, path: str, **kwargs: Any) -> list[SseEvent]:
    """One SSE request to its end (done or error); ApiError for a refusal."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        async with http.stream(method, path, **kwargs) as response:
            if response.status_code >= 400:
                await response.aread()
                raise ApiError(response.status_code, response.json(), response.headers)
            events = []
            async for event in parse_sse(response.aiter_lines()):
                events.append(event)
                if event.event in ("done", "error"):
                    break
            return events


async def finish(url: str, key: str, reply_id: str, events: list[SseEvent]) -> list[SseEvent]:
    """``events`` of a reply, resumed after its last cursor until ``done`` (a broken stream is carried on)."""
    deadline = time.monotonic() + DEADLINE
    while not events or events[-1].event not in ("done", "error"):
        assert time.monotonic() < deadline, f"reply {reply_id} never finished"
        last = next((e.id for e in reversed(events) if e.id), None)
        try:
            events = events + await stream(
                url, key, "GET", f"/v1/messages/{reply_id}/stream", headers={"Last-Event-ID": last} if last else {}
            )
        except (ApiError, httpx.HTTPError):
            await asyncio.sleep(0.5)
    return events


def text_of(events: list[SseEvent]) -> str:
    return "".join(e.data.get("text", "") for e in events if e.event == "delta")


def log_events(kafka: KafkaSettings, conversation_ids: set[str]) -> list[Event]:
    """Every event of these conversations on ``chat.events``, from the beginning to the current end."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"outage-{uuid.uuid4().hex[:6]}"})
    topic = kafka.topic("chat.events")
    parts = range(TOPICS["chat.events"].partitions)
    marks = {p: watermarks(consumer, TopicPartition(topic, p), 10) for p in parts}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: list[Event] = []
    try:
        for msg in read_until(consumer, {(topic, p): high for p, (low, high) in marks.items() if high > low}, DEADLINE):
            event = codec.decode(msg.value())
            if getattr(event, "conversation_id", None) in conversation_ids:
                out.append(event)
        return out
    finally:
        consumer.close()


def dead_letters(kafka: KafkaSettings) -> dict[str, int]:
    """Records on each DLQ of the stack, where any. Nothing this module sends is bad input, and an
    outage is not bad input: the processors retry it in place (streams/handling.py), so none may be there."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"outage-{uuid.uuid4().hex[:6]}"})
    try:
        counts = {name: watermarks(consumer, TopicPartition(kafka.topic(name), 0), 10) for name in TOPICS if name.endswith(".dlq")}
    finally:
        consumer.close()
    return {name: high - low for name, (low, high) in counts.items() if high > low}


# ------------------------------------------------------------------ Kafka restart


async def test_a_kafka_restart_under_load_answers_503_then_recovers_and_loses_no_accepted_turn(both_up: Outage) -> None:
    s = both_up
    client = s.client()
    url, key = s.inner.url, s.key
    accepted: dict[str, tuple[str, list[SseEvent]]] = {}  # reply id → (conversation, events streamed)
    refusals: list[ApiError] = []
    stop = asyncio.Event()

    async def post(cid: str, text: str) -> list[SseEvent] | None:
        """One turn; None when refused (503) or broken before it was accepted."""
        events: list[SseEvent] = []
        try:
            async for event in client.stream_message(cid, text):
                events.append(event)
        except ApiError as exc:
            refusals.append(exc)
            return None
        except httpx.HTTPError:
            pass  # broken mid-stream: accepted if the `message` event came (finished below)
        if events and events[0].event == "message":
            accepted[events[0].data["reply_id"]] = (cid, events)
            return events
        return None

    async def load(cid: str, name: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            if await post(cid, f"{name} turn {n}: tell me more") is None:
                await asyncio.sleep(0.3)

    try:
        cids = [await client.create_conversation(f"load {i}") for i in range(4)]
        first = await post(cids[0], "hello before the outage")
        assert first is not None and first[-1].event == "done", refusals
        loaders = [asyncio.create_task(load(cid, f"c{i}")) for i, cid in enumerate(cids[:3])]
        await asyncio.sleep(2)  # not an assertion: turns are in flight when the broker dies
        in_flight = len(accepted)

        kill(s.infra, "kafka")
        body = await wait_ready(url, False)
        assert body["kafka"] is False
        # New turns are refused quickly and clearly while nothing can be appended.
        probe_deadline = time.monotonic() + DEADLINE
        while True:
            refused = None
            try:
                await asyncio.wait_for(post(cids[3], "during the outage"), 60)  # a POST must not hang
            except asyncio.TimeoutError:
                pytest.fail("a POST hung while Kafka was down")
            refused = refusals[-1] if refusals else None
            if refused is not None and refused.status == 503:
                break
            assert time.monotonic() < probe_deadline, "no 503 while Kafka was down"
        assert refused.body["error"]["code"] == "log_unavailable" and refused.body["error"]["message"]
        assert int(refused.headers["Retry-After"]) >= 1

        restart(s.infra, "kafka")
        await wait_ready(url, True)  # the same gateway process: no restart
        after = None
        recover_deadline = time.monotonic() + DEADLINE
        while after is None or after[-1].event != "done":
            assert time.monotonic() < recover_deadline, "no turn completed after Kafka came back"
            after = await post(cids[3], "after the outage")
            if after is not None:
                after = await finish(url, key, after[0].data["reply_id"], after)
            else:
                await asyncio.sleep(0.5)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*loaders), DEADLINE)

        assert len(accepted) > in_flight, "the load went on after the restart"
        assert all(code is None for code in s.children_alive().values()), s.children_alive()
        # Every accepted turn completes (its stream carried on, or resumes from its last cursor) …
        finished = {rid: await finish(url, key, rid, events) for rid, (_, events) in accepted.items()}
        for rid, events in finished.items():
            assert events[-1].event == "done", (rid, events[-1])
        # … and is stored, as streamed.
        stored: dict[str, dict[str, Any]] = {}
        store_deadline = time.monotonic() + DEADLINE
        while set(finished) - set(stored):
            assert time.monotonic() < store_deadline, f"not stored: {sorted(set(finished) - set(stored))}"
            for cid in {cid for cid, _ in accepted.values()}:
                for m in (await client.conversation(cid))["messages"]:
                    if m["id"] in finished and m["status"] == "complete":
                        stored[m["id"]] = m
            await asyncio.sleep(0.3)
        for rid, events in finished.items():
            assert stored[rid]["content"] == text_of(events), rid
        assert dead_letters(s.inner.kafka) == {}
    finally:
        stop.set()
        await client.close()


# ------------------------------------------------------------------ Cassandra down


async def test_with_cassandra_down_reads_answer_503_replies_still_stream_and_rows_catch_up(both_up: Outage) -> None:
    s = both_up
    client = s.client()
    url = s.inner.url
    try:
        cid = await client.create_conversation("cassandra outage")
        other = await client.create_conversation("another")
        before = await client.send(cid, "hello before the outage")
        assert before.final is not None and before.final.event == "done"
        await client.send(other, "hello too")
        await wait_until_stored(client, cid, {before.head["reply_id"]})

        kill(s.infra, "cassandra")
        # Reads cannot be served: 503 with a clear message, promptly (each call is bounded by the client).
        read_deadline = time.monotonic() + DEADLINE
        while True:
            try:
                await client.conversation(cid)
            except ApiError as exc:
                if exc.status == 503:
                    refused = exc
                    break
            assert time.monotonic() < read_deadline, "reads never answered 503 with Cassandra down"
            await asyncio.sleep(0.2)
        assert refused.body["error"]["code"] == "unavailable" and "retry" in refused.body["error"]["message"]
        assert int(refused.headers["Retry-After"]) >= 1
        assert (await wait_ready(url, True))["ready"], "Cassandra down does not make the gateway unready"

        # Posting and streaming go on: the key was verified, the conversation served here recently.
        await asyncio.sleep(6)  # not an assertion: past PARLEY_GATEWAY_AUTH_CACHE_S, the cached key is stale
        during = [await client.send(cid, f"while Cassandra is down {i}") for i in range(2)]
        during.append(await client.send(other, "and here too"))
        for reply in during:
            assert reply.final is not None and reply.final.event == "done", reply.final
            assert reply.text
        assert all(code is None for code in s.children_alive().values()), s.children_alive()

        restart(s.infra, "cassandra")
        replies = {r.head["reply_id"]: r for r in during}
        conv = await wait_until_stored(client, cid, {during[0].head["reply_id"], during[1].head["reply_id"]})
        await wait_until_stored(client, other, {during[2].head["reply_id"]})
        by_id = {m["id"]: m for m in conv["messages"]}
        # The second message continued the branch the first one ended (known to the gateway, not read back).
        assert by_id[during[1].head["user_message_id"]]["parent_id"] == during[0].head["reply_id"]
        for rid, reply in replies.items():
            if rid in by_id:
                assert by_id[rid]["content"] == reply.text

        # Afterwards the rows are what the log says.
        answers_again(s.inner.session)
        logged = log_events(s.inner.kafka, {cid, other})
        session = connect(s.inner.cassandra, s.inner.cassandra.keyspace)
        try:
            for conversation_id in (cid, other):
                rows = {
                    str(r.message_id): r
                    for r in session.execute(
                        "SELECT message_id, parent_id, role, content, status FROM messages WHERE conversation_id = %s",
                        (uuid.UUID(conversation_id),),
                    )
                }
                mine = [e for e in logged if e.conversation_id == conversation_id]
                posted = [e for e in mine if isinstance(e, MessagePosted)]
                completed = [e for e in mine if isinstance(e, GenerationCompleted)]
                assert set(rows) == {e.message_id for e in posted} | {e.request_id for e in completed}
                for e in posted:
                    assert (rows[e.message_id].role, open_text(rows[e.message_id].content, at=cell_at("messages", "content", e.message_id))) == ("user", e.content)
                    assert _str(rows[e.message_id].parent_id) == e.parent_id
                for e in completed:
                    row = rows[e.request_id]
                    assert (row.role, open_text(row.content, at=cell_at("messages", "content", e.request_id)), row.status) == ("assistant", e.content, "complete")
                    assert _str(row.parent_id) == e.parent_id
        finally:
            session.cluster.shutdown()
        assert dead_letters(s.inner.kafka) == {}
    finally:
        await client.close()


def _str(value: object) -> str | None:
    return None if value is None else str(value)


async def wait_until_stored(client: ParleyClient, cid: str, reply_ids: set[str]) -> dict[str, Any]:
    """The conversation once every reply in ``reply_ids`` is stored finished (reads may 503 meanwhile)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            conv = await client.conversation(cid)
            done = {m["id"] for m in conv["messages"] if m["role"] == "assistant" and m["status"] == "complete"}
            if reply_ids <= done:
                return conv
        except ApiError as exc:
            assert exc.status == 503, exc
        assert time.monotonic() < deadline, f"replies {sorted(reply_ids)} were never stored"
        await asyncio.sleep(0.3)


# ------------------------------------------------------------------ an erasure through a crash and an outage


def _erasure_log_has(child_log: Path, after: int, text: str) -> bool:
    with open(child_log, "rb") as f:
        f.seek(after)
        return text.encode() in f.read()


def _data_key_rows(session: Any, user_id: str) -> list[Any]:
    keyspace = from_env(KeySettings).keyspace or session.keyspace
    return list(session.execute(f"SELECT version, wrapped, kek_id FROM {keyspace}.data_keys WHERE user_id = %s", (user_id,)))


def _erased_on_log(kafka: KafkaSettings, user_id: str) -> list[UserErased]:
    events, _ = read_log(kafka, "user.erasures")
    return [e for e in events if isinstance(e, UserErased) and e.user_id == user_id]


async def test_an_erasure_interrupted_by_killing_its_processor_and_stopping_cassandra_completes(
    both_up: Outage, tmp_path: Path
) -> None:
    """The erasure processor is SIGKILLed while its job waits on a stopped Cassandra; Cassandra and the processor
    come back and the job ends: done, UserErased on the log, the data key destroyed, the rows gone, and
    ``parley audit erasure`` passes on this module's own data dir."""
    s = both_up
    supervisor = s.inner.supervisor
    canary = "zq" + uuid.uuid4().hex[:14]
    user_id, key = s.inner.create_user("to-erase", "plus")
    me = ParleyClient(s.inner.url, key, timeout=60.0)
    try:
        cids = [await me.create_conversation(f"plans {i}") for i in range(2)]
        for cid in cids:
            assert (await me.send(cid, f"Remember {canary} for me.")).final.event == "done"
        doc = await me.upload("notes.txt", f"The code word is {canary}.\n".encode(), "text/plain")
        assert (await me.until_processed(doc["id"]))["status"] == "ready"
        assert any(r.wrapped is not None for r in _data_key_rows(s.inner.session, user_id))

        # No erasure processor while the request is made: the job can only begin once Cassandra is gone.
        first = next(c for c in reversed(supervisor.children) if c.service is ERASURE)
        first.process.kill()
        first.process.wait(30)
        asked = await request_by_operator(s.inner.kafka, s.inner.cassandra, user_id)
        assert asked["erasure"]["status"] == "requested"
        deadline = time.monotonic() + DEADLINE  # refused before the job has run: within the gateway's auth cache bound
        while (status := (await me._http.get("/v1/conversations")).status_code) != 401:
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.5)

        kill(s.infra, "cassandra")
        mark = first.log.stat().st_size
        crashed = supervisor.start(ERASURE)
        deadline = time.monotonic() + DEADLINE
        # It takes the request up and retries it in place (first the read of the user's key that decoding needs).
        while not _erasure_log_has(crashed.log, mark, "failed; retrying in place"):
            assert crashed.process.poll() is None, tail(crashed.log)
            assert time.monotonic() < deadline, "the erasure processor never took the request up"
            await asyncio.sleep(0.3)
        crashed.process.kill()  # mid-job, its request not committed
        crashed.process.wait(30)

        restart(s.infra, "cassandra")
        supervisor.wait_ready(supervisor.start(ERASURE))
        answers_again(s.inner.session)
        deadline = time.monotonic() + DEADLINE
        while (job := erasure_job(s.inner.session, s.inner.cassandra.keyspace, user_id)) is None or job.status != "done":
            assert time.monotonic() < deadline, f"the erasure stopped at {job.status if job else None}"
            await asyncio.sleep(0.5)
        assert (job.conversations, job.documents) == (2, 1)

        erased = _erased_on_log(s.inner.kafka, user_id)
        assert erased and {(e.conversations, e.documents, e.by) for e in erased} == {(2, 1, "operator")}
        keys_left = _data_key_rows(s.inner.session, user_id)
        assert [(r.version, r.kek_id, r.wrapped) for r in keys_left] == [(0, "erased", None)]
        env = {
            **os.environ, **supervisor.env, "PARLEY_DATA_DIR": str(s.infra.data_dir),
            "PARLEY_CASSANDRA_STORAGE_PORT": str(s.infra.cassandra_storage_port),
            "PARLEY_KMS_KEY_FILE": supervisor.env.get("PARLEY_KMS_KEY_FILE") or str(_kek_file(supervisor.env)),
        }  # fmt: skip
        deadline = time.monotonic() + DEADLINE  # the materializer and the document worker purge beside the job
        while (audit := _audit(env, user_id, canary)).returncode != 0:
            assert time.monotonic() < deadline, audit.stdout + audit.stderr
            await asyncio.sleep(3)
        assert dead_letters(s.inner.kafka) == {}
    finally:
        await me.close()


def _kek_file(env: dict[str, str]) -> Path:
    return Path(env.get("PARLEY_DATA_DIR") or REPO_ROOT / ".data") / "kms" / "kek.json"


def _audit(env: dict[str, str], user_id: str, canary: str) -> subprocess.CompletedProcess[str]:
    parley = Path(sys.executable).with_name("parley")
    return subprocess.run(
        [str(parley), "audit", "erasure", user_id, "--canary", canary], env=env, capture_output=True, text=True, timeout=300
    )
