"""Chaos: conversations on a whole stack while a random component, Kafka or Cassandra fails every few seconds.

    python -m bench.chaos [--conversations 200] [--turns 3] [--concurrency 24] [--kill-every 5] [--min-kills 10]
                          [--replicas 3] [--tools]

On loopback: a Kafka and a Cassandra of the run's own (``bench.chaos_infra``: free ports, a data dir
under .data/chaos-*; the shared ones are never touched), and a stack with two workers (each its own
engine) for the one pool used, the context builder, router, materializer, usage processor, and two
gateways. Clients post on one gateway; when a stream breaks
they resume on the other with ``GET /v1/messages/{id}/stream`` and ``Last-Event-ID`` (a POST that
never got its head is retried with the same ``client_message_id``: idempotent).

The faults, in shuffled rounds (each once per round): every service process SIGKILLed and
restarted; the broker SIGKILLed and restarted, and slowed (every request and response delayed
0.2–0.6 s for 10–20 s, by the proxy its clients reach it through); the Cassandra node SIGKILLed and
restarted, and SIGSTOPped for 20–60 s (one service, each in turn, killed and started again halfway
through the pause: a start with Cassandra away). With ``--replicas 3`` the infra is three brokers and
three Cassandra nodes (RF 3, ``min.insync.replicas`` 2, LOCAL_QUORUM): each node of each is in the
rotation, killed or SIGSTOPped on its own (a broker is paused, not slowed: no proxy there), one fault at a
time. The first tenth of the conversations run calm (the
baseline), the rest under chaos; faults go on until ``--min-kills`` and the load are both done (more
conversations are started while faults are missing). Then it waits for quiescence, audits the log
against Cassandra (``tools.audit``) and prints the counts; it exits 1 when a turn was lost, answered
twice, or a row differs, when a process exited that was not killed, or when a gateway answered a read
with a 500, a 503 that is not the JSON error, or not in 30 s (``bench.chaos_probe``). With ``--tools`` every turn
makes the model call a side-effecting tool, the permission broker and the tool executor join the rotation, and
the audit counts each call's effects (``bench.chaos_tools``). Not part of ``make bench``'s default run: it takes
minutes and infra of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import TopicPartition

from bench import chaos_tools
from bench.chaos_infra import PrivateInfra
from bench.chaos_probe import Probe
from tests.e2e.tool_service import Effects, serve
from parley.cassandra import connect
from parley.consumer import reader, watermarks
from parley.settings import REPO_ROOT, KafkaSettings
from schemas import sealing
from schemas.catalog import TOPICS
from tools import isolated
from tools.audit_sources import run_audit
from tools.client import SseEvent, parse_sse, reply_text
from tools.supervisor import Child, StartFailed, free_port
from tools.topology import (
    CONTEXT, ENGINE, GATEWAY, MATERIALIZER, ROUTER, TOOL_BROKER, TOOL_EXECUTOR, USAGE, WORKER_SMALL, Service,
)

#: How long a client keeps trying (resuming, failing over) before it gives up on a turn.
TURN_DEADLINE_S = 300.0
#: SSE error codes that end a stream, not the reply: resume elsewhere.
TRANSIENT = frozenset({"gateway_draining", "log_unavailable"})
ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "50",
    "PARLEY_ENGINE_TOKENS_PER_S": "80",
    "PARLEY_CONTEXT_MAX_TOKENS": "24",
    "PARLEY_CONTEXT_SUMMARY_URL": "",
    "PARLEY_ROUTER_POOLS": "small=chaos-small",
    "PARLEY_STREAMS_SESSION_TIMEOUT_S": "6",
    "PARLEY_WORKER_SESSION_TIMEOUT_MS": "6000",
    "PARLEY_WORKER_HEARTBEAT_S": "0.5",
    "PARLEY_ROUTER_HEARTBEAT_EXPIRY_S": "3",
}


@dataclass
class Turn:
    phase: str
    began: float
    ended: float = 0.0
    ttft: float | None = None
    outcome: str = "lost"  # done | error | lost
    code: str = ""
    reply_id: str = ""
    cid: str = ""
    resumed: int = 0
    text: str = ""
    late: bool = False  # the client gave up and a reload after the storm was tried
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (gateway, SSE id, event) for a post-mortem


@dataclass
class Component:
    """One killable process and how to start it again."""

    name: str
    service: Service
    child: Child
    extra_env: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)


#: How long the Cassandra node stays SIGSTOPped; how long, and by how much, the broker is slowed.
PAUSE_S = (20.0, 60.0)
SLOW_S = (10.0, 20.0)
SLOW_DELAY_S = (0.2, 0.6)


@dataclass(frozen=True)
class Fault:
    """One fault of the rotation: ``action`` (kill | pause | slow) done to ``target`` (a component's
    name, ``kafka`` or ``cassandra``), node ``node`` of it (infra only: None while there is one)."""

    action: str
    target: str
    node: int | None = None

    @property
    def label(self) -> str:
        return f"{self.action} {_kind(self.target)}" + (f" {self.node}" if self.node is not None else "")

    @property
    def index(self) -> int:
        return self.node or 0


class Chaos:
    def __init__(self, inner: isolated.IsolatedStack, infra: PrivateInfra, components: list[Component]) -> None:
        self.inner, self.infra, self.components = inner, infra, components
        self.kills: Counter[str] = Counter()
        self.exited: Counter[str] = Counter()  # processes that exited on their own (and were started again)
        self._bag: list[Fault] = []
        self._paused = 0  # pauses so far: which component restarts during the next one
        #: Starts during a Cassandra outage that failed (the process exited or never became ready).
        self.failed_starts: Counter[str] = Counter()

    def rotation(self) -> list[Fault]:
        """One round: every fault once (every node of the infra)."""
        faults = [Fault("kill", c.name) for c in self.components]
        for name in ("kafka", "cassandra"):
            count = self.infra.nodes[name]
            for node in range(count) if count > 1 else [None]:
                other = "slow" if name == "kafka" and self.infra.can_slow else "pause"
                faults += [Fault("kill", name, node), Fault(other, name, node)]
        return faults

    def kill_one(self, rng: random.Random) -> str:
        """Do the next fault of the round and recover from it; what was done, in words."""
        if not self._bag:  # shuffled rounds: random order, but every fault once per round
            self._bag = self.rotation()
            rng.shuffle(self._bag)
        f = self._bag.pop()
        said = f.label
        self.restart_exited()
        if f.action == "pause":
            # Halfway through, one service (each in turn) is killed and started again: a process that
            # starts while Cassandra is away, with every key cache empty (review C2).
            seconds, c = rng.uniform(*PAUSE_S), self.components[self._paused % len(self.components)]
            self._paused += 1
            self.infra.pause(f.target, seconds, f.index, meanwhile=lambda: self.kill_and_start(c))
            self.await_start(c)
            self.kills[f"kill {_kind(c.name)} during a {f.target} pause"] += 1
            said += f" for {seconds:.0f} s, {c.name} killed and started meanwhile"
        elif f.action == "slow":
            seconds, delay = rng.uniform(*SLOW_S), rng.uniform(*SLOW_DELAY_S)
            self.infra.slow(seconds, delay)
            said += f" by {delay * 1000:.0f} ms for {seconds:.0f} s"
        elif f.target in ("kafka", "cassandra"):
            self.infra.kill(f.target, f.index)  # same data dir, same ports
        else:
            c = next(c for c in self.components if c.name == f.target)
            c.child.process.kill()
            c.child.process.wait(30)
            time.sleep(0.5)
            self.restart(c)
        self.kills[f.label] += 1
        return said

    def kill_and_start(self, c: Component) -> None:
        c.child.process.kill()
        c.child.process.wait(30)
        c.child = self.inner.supervisor.start(c.service, name=c.name, extra_env=c.extra_env, ports=c.ports)

    def await_start(self, c: Component) -> None:
        """``c``, started during an outage, ready now; a start that failed is counted and done again."""
        try:
            self.inner.supervisor.wait_ready(c.child, timeout=180)
        except StartFailed as exc:
            print(f"  {c.name}, started during the outage, failed: {str(exc).splitlines()[0]}", flush=True)
            self.failed_starts[c.name] += 1
            c.child.process.kill()
            c.child.process.wait(30)
            self.restart(c)

    def restart_exited(self) -> None:
        """Count and start again every process that exited without being killed: none should."""
        for c in self.components:
            if c.child.process.poll() is not None:
                print(f"  {c.name} had exited on its own (code {c.child.process.returncode}); see {c.child.log}", flush=True)
                self.exited[c.name] += 1
                self.restart(c)

    def restart(self, c: Component, tries: int = 10) -> None:
        """Start ``c`` again; a start that fails (its log says why) is retried, not given up on."""
        for attempt in range(tries):
            c.child = self.inner.supervisor.start(c.service, name=c.name, extra_env=c.extra_env, ports=c.ports)
            try:
                self.inner.supervisor.wait_ready(c.child, timeout=180)
                return
            except StartFailed as exc:
                print(f"  restart of {c.name} failed (try {attempt + 1}): {str(exc).splitlines()[-1]}", flush=True)
                c.child.process.kill()
                c.child.process.wait(30)
                time.sleep(3.0)
        raise RuntimeError(f"{c.name} did not start again after {tries} tries; see {c.child.log}")


def _kind(name: str) -> str:
    return name.rstrip("-0123456789") if not name.startswith("w") else "worker"


class Clients:
    """Conversations over two gateways with fail-over and resume."""

    def __init__(self, urls: list[str], key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        timeout = httpx.Timeout(60, connect=5)
        self.http = [httpx.AsyncClient(base_url=u, headers=headers, timeout=timeout) for u in urls]

    async def close(self) -> None:
        for h in self.http:
            await h.aclose()

    async def create(self, first: int) -> str:
        for attempt in range(200):
            try:
                r = await self.http[(first + attempt) % 2].post("/v1/conversations", json={"title": "chaos"})
                if r.status_code < 300:
                    return r.json()["id"]
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
        raise RuntimeError("no gateway created a conversation in 100 s")

    async def turn(self, cid: str, text: str, first: int, phase: str, tools: list[str] | None = None) -> Turn:
        return await self._follow(Turn(phase, time.monotonic()), cid, text, first, TURN_DEADLINE_S, tools)

    async def resume(self, lost: Turn) -> Turn:
        """The reply of a turn the client gave up on, from its start (what a reload does)."""
        return await self._follow(Turn(lost.phase, time.monotonic(), reply_id=lost.reply_id, cid=lost.cid), "", "", 0, 60.0)

    async def _follow(
        self, t: Turn, cid: str, text: str, first: int, deadline_s: float, tools: list[str] | None = None
    ) -> Turn:
        cmid, gw, cursor = uuid.uuid4().hex, first, None
        t.cid = t.cid or cid
        events: list[SseEvent] = []
        deadline = t.began + deadline_s
        while time.monotonic() < deadline:
            http = self.http[gw]
            try:
                # The deadline holds within a connection too: a stream kept open by heartbeats alone ends here.
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    if not t.reply_id:
                        body = {"content": text, "client_message_id": cmid, **({"tools": tools} if tools else {})}
                        request = http.build_request("POST", f"/v1/conversations/{cid}/messages", json=body)
                    else:
                        if cursor is None:  # replayed from the start: forget what was streamed
                            events = [e for e in events if e.event != "delta"]
                        request = http.build_request(
                            "GET", f"/v1/messages/{t.reply_id}/stream", headers={"Last-Event-ID": cursor} if cursor else {}
                        )
                    response = await http.send(request, stream=True)
                    try:
                        if response.status_code >= 400:
                            await response.aread()
                            if response.status_code in (400, 401, 403, 413, 415, 422):
                                t.outcome, t.code = "error", f"http_{response.status_code}"
                                break
                            raise httpx.TransportError(f"HTTP {response.status_code}")  # 404 (not materialised yet), 429, 5xx
                        async for e in parse_sse(response.aiter_lines()):
                            t.seen.append((str(gw), e.id or "", f"delta {len(e.data.get('text', ''))}" if e.event == "delta" else f"{e.event} {e.data}"[:300]))
                            if e.id:
                                cursor = e.id
                            if e.event == "message":
                                t.reply_id = e.data["reply_id"]
                                continue
                            if e.event == "error" and e.data.get("code") in TRANSIENT:
                                break
                            events.append(e)
                            if e.event == "delta" and t.ttft is None:
                                t.ttft = time.monotonic() - t.began
                            if e.event in ("done", "error"):
                                t.outcome, t.code = e.event, e.data.get("code", "")
                                t.text = reply_text(events)
                                t.ended = time.monotonic()
                                return t
                    finally:
                        await response.aclose()
            except (httpx.HTTPError, TimeoutError):
                pass
            gw = 1 - gw  # fail over to the other gateway
            if t.reply_id:
                t.resumed += 1
            await asyncio.sleep(0.3)
        t.ended = time.monotonic()
        return t


async def finish_late(urls: list[str], key: str, late: list[Turn]) -> None:
    clients = Clients(urls, key)
    try:
        for t in late:
            again = await clients.resume(t)
            t.late = True
            if again.outcome != "lost":
                t.outcome, t.code, t.text = again.outcome, again.code, again.text
    finally:
        await clients.close()


async def load(args: argparse.Namespace, urls: list[str], key: str, chaos: Chaos, probe: Probe) -> tuple[list[Turn], dict[str, float]]:
    """``drive`` with clients of its own event loop (a client's connections belong to the loop that made them)."""
    clients = Clients(urls, key)
    try:
        return await drive(args, clients, chaos, probe)
    finally:
        await clients.close()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n")[0])
    p.add_argument("--conversations", type=int, default=200)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=24)
    p.add_argument("--kill-every", type=float, default=10.0, help="seconds between the end of one fault's recovery and the next fault")
    p.add_argument("--min-kills", type=int, default=10, help="faults (kills, pauses, slow brokers) to do at least")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--replicas", type=int, default=1, choices=(1, 3),
        help="1: one broker and one Cassandra node; 3: three of each (RF 3), faults on one node at a time",
    )
    p.add_argument(
        "--tools", action="store_true",
        help="every turn calls a side-effecting tool; the tool broker and executor are killed too (bench.chaos_tools)",
    )
    return p.parse_args(argv)


def start_stack(
    infra: PrivateInfra, log_dir: Path, effects: Effects | None = None
) -> tuple[isolated.IsolatedStack, list[Component], list[str]]:
    kafka, cassandra = isolated.prepare(*infra.client_settings(), "chaos")
    services: tuple[Service, ...] = (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, MATERIALIZER, USAGE, GATEWAY)
    env = dict(ENV)
    if effects is not None:
        services = (*services[:-1], TOOL_BROKER, TOOL_EXECUTOR, GATEWAY)
        env["PARLEY_TOOLS_FILE"] = str(chaos_tools.write_config(effects, log_dir.parent / "tools.json"))
    log_dir.mkdir(parents=True, exist_ok=True)
    inner = isolated.start(kafka, cassandra, log_dir, env, services=services)
    by_name = {c.service.name: c for c in inner.supervisor.children}
    port = int(inner.url.rsplit(":", 1)[1])
    components = [
        Component("w1", WORKER_SMALL, by_name["worker-small"]),
        Component("context", CONTEXT, by_name["context"]),
        Component("router", ROUTER, by_name["router"]),
        Component("materializer", MATERIALIZER, by_name["materializer"]),
        Component("usage", USAGE, by_name["usage"]),
        Component("gateway-1", GATEWAY, by_name["gateway"], ports={"gateway_port": port}),
    ]
    if effects is not None:
        components += [Component("tools", TOOL_BROKER, by_name["tools"]), Component("tool-executor", TOOL_EXECUTOR, by_name["tool-executor"])]
    _, w2 = isolated.add_worker(inner, WORKER_SMALL, "w2")
    components.append(Component("w2", WORKER_SMALL, w2, extra_env={"PARLEY_WORKER_ENGINE_URLS": _env_of(w2, "PARLEY_WORKER_ENGINE_URLS"), "PARLEY_WORKER_ID": "w2"}))
    port2 = free_port()
    g2 = inner.supervisor.start(GATEWAY, name="gateway-2", extra_env={"PARLEY_GATEWAY_PORT": str(port2)}, ports={"gateway_port": port2})
    inner.supervisor.wait_ready(g2)
    components.append(Component("gateway-2", GATEWAY, g2, extra_env={"PARLEY_GATEWAY_PORT": str(port2)}, ports={"gateway_port": port2}))
    return inner, components, [inner.url, f"http://127.0.0.1:{port2}"]


def _env_of(child: Child, name: str) -> str:
    raw = Path(f"/proc/{child.process.pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in raw if v.startswith(name.encode() + b"="))


async def drive(args: argparse.Namespace, clients: Clients, chaos: Chaos, probe: Probe) -> tuple[list[Turn], dict[str, float]]:
    rng = random.Random(args.seed)
    calm_n = max(1, args.conversations // 10)
    turns: list[Turn] = []
    sem = asyncio.Semaphore(args.concurrency)
    marks: dict[str, float] = {}

    async def conversation(i: int, phase: str) -> None:
        async with sem:
            cid = await clients.create(i)
            for n in range(args.turns):
                text, tools = chaos_tools.turn_text(i, n) if args.tools else (f"conversation {i}, turn {n}: go on", None)
                turns.append(await clients.turn(cid, text, i % 2, phase, tools))

    calm_over = asyncio.Event()

    async def watch_calm() -> None:  # a process that exits before the first fault is counted and started again too
        while not calm_over.is_set():
            await asyncio.to_thread(chaos.restart_exited)
            try:
                await asyncio.wait_for(calm_over.wait(), 5.0)
            except asyncio.TimeoutError:
                pass

    marks["calm_start"] = time.monotonic()
    watcher = asyncio.create_task(watch_calm())
    await asyncio.gather(*(conversation(i, "calm") for i in range(calm_n)))
    calm_over.set()
    await watcher  # never two restarts of one process at once: the killer starts after it
    marks["calm_end"] = marks["chaos_start"] = time.monotonic()

    stop = asyncio.Event()

    async def killer() -> None:
        while not stop.is_set() or sum(chaos.kills.values()) < args.min_kills:
            await asyncio.sleep(args.kill_every)
            victim = await asyncio.to_thread(chaos.kill_one, rng)
            print(f"  {time.monotonic() - marks['chaos_start']:6.1f}s {victim}, recovered", flush=True)

    kills = asyncio.create_task(killer())
    probing = asyncio.create_task(probe.run(stop, await clients.create(0)))
    pending = [asyncio.create_task(conversation(i, "chaos")) for i in range(calm_n, args.conversations)]
    started = args.conversations
    while pending:
        done, rest = await asyncio.wait([*pending, kills], return_when=asyncio.FIRST_COMPLETED)
        if kills in done:
            kills.result()  # a component that would not start again: stop here, the run proves nothing
        pending = [t for t in rest if t is not kills]
        if sum(chaos.kills.values()) < args.min_kills and len(pending) < args.concurrency:
            pending.append(asyncio.create_task(conversation(started, "chaos")))
            started += 1
    marks["chaos_end"] = time.monotonic()
    stop.set()
    await kills
    await probing
    await asyncio.to_thread(chaos.restart_exited)  # the last fault's aftermath too
    return turns, marks


def rate(turns: list[Turn], seconds: float) -> float:
    return sum(t.outcome == "done" for t in turns) / seconds if seconds > 0 else 0.0


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    from parley import keys

    args = parse_args(sys.argv[1:] if argv is None else argv)
    # One keys keyspace for this process and the stack's (they inherit the environment), as the tests do:
    # the audit opens what the stack sealed.
    os.environ.setdefault("PARLEY_KEYS_KEYSPACE", "bench_keys")
    run = uuid.uuid4().hex[:6]
    infra = PrivateInfra(REPO_ROOT / ".data" / f"chaos-{run}", args.replicas)
    inner = None
    try:
        infra.up()
        # This process's own clients (the key service, the audit) use the private infra too.
        os.environ.update(infra.client_env())
        effects = serve() if args.tools else None
        inner, components, urls = start_stack(infra, infra.cfg.data_dir / "logs", effects)  # migrates the keys keyspace
        keys.install_from_env()
        key = inner.create_user("chaos", "enterprise")[1]
        chaos = Chaos(inner, infra, components)
        probe = Probe(urls, key)
        turns, marks = asyncio.run(load(args, urls, key, chaos, probe))
        print("load done; waiting for quiescence and auditing…", flush=True)
        report, undecodable = run_audit(inner.kafka, inner.cassandra, wait_s=180.0)
        # A user whose client gave up reloads the page later: one more resume of each such turn, now.
        late = [t for t in turns if t.outcome == "lost" and t.reply_id]
        if late:
            asyncio.run(finish_late(urls, key, late))
        text = compare_text(inner, turns, infra.cfg.data_dir / "streamed-vs-stored.jsonl")
        dlq = dead_letters(inner.kafka)
        conversations = sorted({t.cid for t in turns if t.cid})
        tools = asyncio.run(chaos_tools.audit(urls, key, conversations, effects)) if effects is not None else None
        return summarise(args, turns, marks, chaos, probe, report, undecodable, text, dlq, tools)
    finally:
        if inner is not None:
            inner.stop()
        infra.down()
        print(f"logs and data of this run: {infra.cfg.data_dir}")


def dead_letters(kafka: KafkaSettings) -> Counter[str]:
    """Records on each dead-letter topic of the run: none should be there, since only bad input is
    dead-lettered and the bench sends none (an outage is retried in place)."""
    found: Counter[str] = Counter()
    consumer = reader(kafka, "chaos-dead-letters")
    try:
        for topic in TOPICS.values():
            if topic.name.endswith(".dlq"):
                for p in range(topic.partitions):
                    low, high = watermarks(consumer, TopicPartition(kafka.topic(topic.name), p), 10)
                    if high > low:
                        found[topic.name] += high - low
    finally:
        consumer.close()
    return found


def compare_text(inner: isolated.IsolatedStack, turns: list[Turn], out: Path) -> Counter[str]:
    """Each completed turn's streamed text against its stored reply: equal, missing its opening
    (the stored text ends with what was streamed), or otherwise different. The different ones are
    written to ``out`` (synthetic text, ids, the SSE events the client saw) for a post-mortem."""
    found: Counter[str] = Counter()
    different = []
    # A session of its own: the stack's, open since the start, may still count the node down after its
    # restarts (a 40-fault run lost its table to NoHostAvailable here).
    session = connect(inner.cassandra, inner.cassandra.keyspace, connect_timeout=isolated.CONNECT_TIMEOUT_S)
    try:
        for t in turns:
            if t.outcome != "done" or not t.cid:
                continue
            row = session.execute(
                "SELECT content FROM messages WHERE conversation_id = %s AND message_id = %s",
                (uuid.UUID(t.cid), uuid.UUID(t.reply_id)),
                timeout=60,
            ).one()
            _compare(t, row, found, different)
    finally:
        session.cluster.shutdown()
    if different:
        out.write_text("\n".join(json.dumps(d) for d in different) + "\n")
        print(f"  streamed ≠ stored: {len(different)} written to {out}")
    return found


def _compare(t: Turn, row: Any, found: Counter[str], different: list[dict[str, Any]]) -> None:
    at = sealing.cell_at("messages", "content", uuid.UUID(t.reply_id))
    stored = "" if row is None or row.content is None else sealing.open_text(row.content, at=at) or ""
    if stored == t.text:
        found["equal"] += 1
        return
    kind = "opening_missing" if stored.endswith(t.text) else "different"
    found[kind] += 1
    different.append({"kind": kind, "reply_id": t.reply_id, "cid": t.cid, "streamed": t.text, "stored": stored, "events": t.seen})


def summarise(
    args, turns: list[Turn], marks: dict[str, float], chaos: Chaos, probe: Probe, report: Any, undecodable: int,
    text: Counter[str], dlq: Counter[str], tools: Counter[str] | None = None,
) -> int:
    accepted = [t for t in turns if t.reply_id]
    client_lost = [t for t in turns if t.outcome == "lost"]
    lost = len(client_lost) + len(report.turns.in_flight)
    failed = Counter(t.code for t in turns if t.outcome == "error")
    calm = [t for t in turns if t.phase == "calm"]
    storm = [t for t in turns if t.phase == "chaos"]
    calm_s, storm_s = marks["calm_end"] - marks["calm_start"], marks["chaos_end"] - marks["chaos_start"]
    print(f"\n== bench.chaos: {len(turns) // args.turns} conversations × {args.turns} turns, {sum(chaos.kills.values())} faults")
    rows = [
        ("turns posted", len(turns)),
        ("turns accepted (reply id received)", len(accepted)),
        ("completed (done)", sum(t.outcome == "done" for t in turns)),
        ("failed with a clear error", f"{sum(failed.values())} {dict(failed) if failed else ''}"),
        ("lost (client never saw an end, or no completion on the log) [must be 0]", lost),
        ("duplicated replies / conflicting completions / repeated text [must be 0]", report.duplicates),
        ("Cassandra rows ≠ log projection [must be 0]", report.row_problems),
        ("completed replies streamed with their opening missing [must be 0]", text["opening_missing"]),
        ("completed replies streamed otherwise ≠ stored [must be 0]", text["different"]),
        ("records dead-lettered [must be 0]", f"{sum(dlq.values())} {dict(dlq) if dlq else ''}"),
        ("service processes that exited on their own [must be 0]", f"{sum(chaos.exited.values())} {dict(chaos.exited) if chaos.exited else ''}"),
        ("starts during a Cassandra pause that failed [must be 0]", f"{sum(chaos.failed_starts.values())} {dict(chaos.failed_starts) if chaos.failed_starts else ''}"),
        ("gateway reads answered 500, 503 without JSON, or not in 30 s [must be 0]", probe.failures),
        ("gateway reads by outcome (every 2 s on each, Cassandra outages included)", dict(sorted(probe.seen.items()))),
        ("undecodable records on chat.events", undecodable),
        ("streams resumed on the other gateway", sum(t.resumed for t in turns)),
        ("turns the client gave up on, ended by a reload after the storm", sum(t.late and t.outcome != "lost" for t in turns)),
        ("turns resumed at least once", sum(t.resumed > 0 for t in turns)),
        ("completions re-appended with the same outcome (re-deliveries)", report.turns.reappended),
        ("faults by kind", dict(sorted(chaos.kills.items()))),
    ]
    if tools is not None:
        rows += [
            ("tool calls by outcome", {k.removeprefix("calls "): v for k, v in sorted(tools.items()) if k.startswith("calls ")}),
            ("tool calls ok without exactly one effect [must be 0]", tools["ok without exactly one effect"]),
            ("tool calls unknown with more than one effect [must be 0]", tools["unknown with more than one effect"]),
            ("tool calls not run, yet an effect [must be 0]", tools["not run, yet an effect"]),
            ("tool calls never finished [must be 0]", tools["unfinished"]),
            ("tool effects under no call's key [must be 0]", tools["effects under no call's key"]),
            ("idempotent calls asked again with the same key (a new owner's retry)", tools["asked again with the same key (add_expense)"]),
            ("non-idempotent calls sent twice [must be 0]", tools["asked again with the same key (charge_card)"]),
        ]
    for name, value in rows:
        print(f"  {name:<78} {value}")
    calm_rate, storm_rate = rate(calm, calm_s), rate(storm, storm_s)
    calm_ttft, storm_ttft = p50([t.ttft for t in calm if t.ttft]), p50([t.ttft for t in storm if t.ttft])
    print(f"  {'baseline (calm phase): completed turns/s, TTFT p50':<78} {calm_rate:.2f}/s, {calm_ttft * 1000:.0f} ms ({len(calm)} turns, {calm_s:.0f} s)")
    print(f"  {'under chaos: completed turns/s, TTFT p50':<78} {storm_rate:.2f}/s, {storm_ttft * 1000:.0f} ms ({len(storm)} turns, {storm_s:.0f} s)")
    print(f"  {'ratio chaos / calm: throughput, TTFT p50':<78} {storm_rate / calm_rate if calm_rate else float('nan'):.2f}x, {storm_ttft / calm_ttft:.2f}x")
    ok = (
        lost == 0
        and report.duplicates == 0
        and report.row_problems == 0
        and not report.turns.unrequested
        and text["opening_missing"] == text["different"] == 0
        and probe.failures == 0
        and not chaos.exited
        and not dlq
        and not chaos.failed_starts
        and (
            tools is None
            or not any(
                tools[k]
                for k in (
                    "ok without exactly one effect", "unknown with more than one effect", "not run, yet an effect",
                    "unfinished", "effects under no call's key", "asked again with the same key (charge_card)",
                )
            )
        )
    )
    for kind in ("duplicate_replies", "conflicting_completions", "repeated_text", "unrequested"):
        found = getattr(report.turns, kind)
        if found:
            print(f"  {kind}: {found[:5]}")
    for bad in probe.bad[:5]:
        print(f"  gateway read: {bad}")
    if not ok:
        for what, keys in (("missing", report.missing), ("extra", report.extra)):
            for key in keys[:5]:
                print(f"  row {what}: {key[0]} {key[1]}")
        for d in report.differing[:8]:
            shown = "" if d.column == "content" else f" log says {d.expected!r:.60}, row has {d.found!r:.60}"
            print(f"  differs: {d.key[0]} {d.key[1]} .{d.column}{shown}")
        print(f"  in flight on the log: {report.turns.in_flight[:5]}; client-lost reply ids: {[t.reply_id or '-' for t in client_lost][:5]}")
    print("  invariants:", "hold" if ok else "BROKEN")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
