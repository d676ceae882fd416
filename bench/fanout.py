"""Gateway fan-out alone: N SSE streams of one gateway process, fed from ``chat.tokens`` by the benchmark.

One run starts an isolated namespace (tools/isolated.py) with only the gateway
(it needs Kafka and Cassandra, nothing else: no engine, no processors). Per
step it posts a message in each of N conversations, so the gateway opens each
reply's stream at the partition's end and appends its GenerationRequested, as
for any turn; then the benchmark itself plays the worker: it produces
TokenChunk records for those N request ids onto ``chat.tokens`` at ``--rate``
chunks/s each (phases spread evenly, never in bursts), for ``--seconds``, then
each reply's final chunk. Each chunk's text is its produce wall time (µs), so a
reader's lag is its receive wall time minus that (one machine, one clock).

The SSE readers run in their own processes (``--readers``), on raw asyncio
sockets with one regex per read: they must not be what is measured. The
baseline runs in the same step on the same records: a plain confluent-kafka
reader of every ``chat.tokens`` partition, in a process of its own, polling
with the gateway's fetch settings and decoding a sample with the codec. Its lag
is what the log itself gives any reader (producer linger, broker, fetch) on
this machine at this load, so gateway ÷ baseline is what the gateway adds for
N streams. Per step it prints the lag p50/p99 of both, chunks delivered per
second, streams that missed or repeated a chunk (must be 0), and each
process's CPU (cores busy over the step; the gateway's also as µs per chunk),
the load generator's (producer, readers, baseline) included: all of it shares
the machine's cores.

The knee (the largest N that met the bar, every smaller step meeting it too or
missing it with the baseline: the machine, not the gateway) goes
to ``bench/results/fanout.json`` (bench/results.py): the streams per gateway
process ``parley capacity`` sizes gateways by.

Run: `python -m bench.fanout [--streams 100,500,1000,2000] [--rate 30] [--seconds S] [--readers R]`
with Kafka and Cassandra up (`make infra`).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from confluent_kafka import Producer, TopicPartition

from bench.load import TICK, cpu_seconds, pct
from bench.results import record, this_command
from infra.local import stack as infra_stack
from infra.local.settings import LocalInfraSettings
from parley import ids
from parley.consumer import poll_batch, reader, watermarks
from parley.kafka import producer_config
from parley.partitioning import partition_for
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import codec
from schemas.catalog import TOPICS
from tools import isolated
from tools.topology import GATEWAY

TOKENS = "chat.tokens"
PARTITIONS = TOPICS[TOKENS].partitions
LAG_BAR_S = 0.100  # the target: 2,000 streams at 30 chunks/s, p99 < 100 ms
#: A chunk's text is its produce time in µs and a space; a delta carries one, or several when the
#: gateway sent chunks that queued up behind each other as one (gateway/replies.py).
STAMP = re.compile(rb"([0-9]{16}) ")
END = re.compile(rb"event: (done|error)\r?\n")


# ------------------------------------------------------------------ TokenChunk bytes, cheaply


def _long(n: int) -> bytes:
    """An Avro long: zigzag, then a little-endian base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _string(s: str) -> bytes:
    raw = s.encode()
    return _long(len(raw)) + raw


class ChunkWriter:
    """One reply's TokenChunk records in Avro single-object encoding, written field by field.

    ``codec.encode`` (a dataclass, then fastavro) costs ~10 µs a record, a third of a core at
    60,000 chunks/s on a machine the gateway shares; this writes the same bytes (a unit test
    decodes them with the codec) in a fraction of it. Fields left out are their defaults.
    """

    def __init__(self, conversation_id: str, user_id: str, request_id: str) -> None:
        fp, _ = codec.default_schemas().current["TokenChunk"]
        self._head = codec.MAGIC + fp
        self._ids = _string(conversation_id) + _string(user_id) + _string(request_id)
        self._chars = 0
        # Event ids: the reply's id (a uuid5) with its last twelve digits the chunk's seq, unique without
        # uuid4's 2 µs a chunk; nothing on this path dedupes by event id.
        self._event_id = b"\x48" + request_id[:24].encode()  # 36 characters

    def _event(self, seq: int) -> bytes:
        return self._event_id + b"%012x" % seq

    def chunk(self, seq: int, text: str, stamp_us: int) -> bytes:
        body = (
            self._event(seq), _long(stamp_us), b"\x00", self._ids,  # event_id, occurred_at, trace_id "", ids
            b"\x00", _long(seq), _string(text), b"\x02", _long(self._chars),  # attempt 0, seq, text, tokens 1, offset_chars
            b"\x00\x00", b"\x0abench", b"\x00", b"\x00\x00\x00",  # no finish, no usage; replica; model ""; no error
            b"\x00\x00\x00\x00",  # no citations, citation_status "", documents_note "", no tool_calls
        )
        self._chars += len(text)
        return self._head + b"".join(body)

    def final(self, seq: int, stamp_us: int, completion_tokens: int) -> bytes:
        usage = b"\x02" + _long(10) + _long(0) + _long(completion_tokens)  # prompt, cached, completion
        body = (
            self._event(seq), _long(stamp_us), b"\x00", self._ids,
            b"\x00", _long(seq), b"\x00", b"\x00", _long(self._chars),  # no text, no tokens
            b"\x02" + _string("stop"), usage, b"\x0abench", b"\x00", b"\x00\x00\x00",
            b"\x00\x00\x00\x00",  # no citations, citation_status "", documents_note "", no tool_calls
        )
        return self._head + b"".join(body)


# ------------------------------------------------------------------ the SSE readers (a process each)


class _Sse(asyncio.Protocol):
    """One POST whose response is a reply's SSE stream, read with a regex per read."""

    def __init__(self, request: bytes, lags: array.array) -> None:
        self.request = request
        self.lags = lags
        self.tail = b""
        self.seen = 0
        self.deltas = 0
        self.last = 0
        self.disorder = 0
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.tail + data
        cut = buf.rfind(b"\n") + 1
        self.tail, whole = buf[cut:], buf[:cut]
        if not self.opened.done():
            if whole.startswith(b"HTTP/") and not whole.startswith(b"HTTP/1.1 200"):
                self.opened.set_exception(RuntimeError(whole.split(b"\r\n", 1)[0].decode()))
                return
            if b"event: message" in whole:
                self.opened.set_result(None)
        self.deltas += whole.count(b"event: delta")
        for raw in STAMP.findall(whole):
            stamp = int(raw)
            self.lags.append(now - stamp * 1e-6)
            self.seen += 1
            if stamp <= self.last:
                self.disorder += 1
            self.last = stamp
        if END.search(whole) and not self.ended.done():
            self.ended.set_result(None)
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in (self.opened, self.ended):
            if not fut.done():
                fut.set_exception(ConnectionError(f"stream closed early: {exc}"))


async def _read_streams(url: str, key: str, posts: list[tuple[str, str]], deadline_s: float, lags: array.array) -> dict:
    host, port = url.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(64)  # POSTs in flight while opening: the gateway's setup is not what is measured
    streams: list[_Sse] = []

    async def open_one(cid: str, client_id: str) -> None:
        body = json.dumps({"content": "stream me", "client_message_id": client_id}).encode()
        head = (
            f"POST /v1/conversations/{cid}/messages HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        stream = _Sse(head.encode() + body, lags)
        streams.append(stream)
        async with gate:
            await loop.create_connection(lambda: stream, host, int(port))
            await asyncio.wait_for(stream.opened, 60)

    await asyncio.gather(*(open_one(cid, client_id) for cid, client_id in posts))
    print("ready", flush=True)
    ended = await asyncio.wait([s.ended for s in streams], timeout=deadline_s)
    failed = sum(1 for f in ended[0] if f.exception() is not None)
    for s in streams:
        if s.transport is not None:
            s.transport.close()
    return {
        "ended": len(ended[0]) - failed,
        "failed": failed,
        "counts": [s.seen for s in streams],
        "deltas": sum(s.deltas for s in streams),
        "disorder": sum(s.disorder for s in streams),
    }


def reader_role(url: str, key: str, out: str, deadline_s: float) -> None:
    """``--role reader``: stdin names the (conversation, client message id) to post; prints ``ready``, then a summary."""
    posts = [tuple(p) for p in json.loads(sys.stdin.readline())]
    lags = array.array("d")
    summary = asyncio.run(_read_streams(url, key, posts, deadline_s, lags))  # type: ignore[arg-type]
    Path(out).write_bytes(lags.tobytes())
    print(json.dumps(summary), flush=True)


# ------------------------------------------------------------------ the baseline (a process)


def baseline_role(out: str, sample: int) -> None:
    """``--role baseline``: read every chat.tokens partition from its end; decode every ``sample``-th record.

    Prints ``ready`` once assigned, a summary once stdin closes."""
    kafka = from_env(KafkaSettings)
    consumer = reader(kafka, "bench-fanout", fetch_wait_max_ms=10, fetch_min_bytes=1)  # the gateway's fetch settings
    topic = kafka.topic(TOKENS)
    starts = []
    for p in range(PARTITIONS):
        _, high = watermarks(consumer, TopicPartition(topic, p), 10)
        starts.append(TopicPartition(topic, p, high))
    consumer.assign(starts)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    lags = array.array("d")
    records = 0
    while not stop.is_set():
        for msg in poll_batch(consumer, 500, 0.05):
            if msg.error():
                continue
            records += 1
            if records % sample:
                continue
            event = codec.decode(msg.value())
            now = time.time()
            text = getattr(event, "text", "")
            if text:
                lags.append(now - int(text.split(" ", 1)[0]) * 1e-6)
    consumer.close()
    Path(out).write_bytes(lags.tobytes())
    print(json.dumps({"records": records}), flush=True)


# ------------------------------------------------------------------ one step


@dataclass
class Result:
    n: int
    lags: array.array
    baseline: array.array
    delivered: int = 0
    deltas: int = 0  # SSE delta events: fewer than chunks where the gateway sent queued-up chunks as one
    expected: int = 0
    wrong_streams: int = 0  # a stream that got another number of chunks than were produced for it
    disorder: int = 0
    failed: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # process → cores busy over the step
    gateway_waited: float = 0.0  # the gateway's threads' seconds runnable without a CPU, per second


def waited_seconds(pid: int) -> float:
    """Seconds ``pid``'s threads spent runnable but waiting for a CPU so far (schedstat); 0 when it is gone.

    On a machine shared with Kafka, the load generator and other people's work, this tells a process
    that is too slow from one that did not get the cores it asked for."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    except OSError:
        return 0.0
    return total / 1e9


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every process, ours or not), from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICK


def _role(args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.fanout", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _expect_ready(proc: subprocess.Popen, what: str) -> None:
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if line.strip() != "ready":
        raise RuntimeError(f"{what} did not start: {line!r} (exit {proc.poll()})")


def _produce(
    producer: Producer, topic: str, replies: list[tuple[str, ChunkWriter]], rate: float, chunks: int
) -> None:
    """``chunks`` chunks per reply at ``rate`` each, phases spread evenly; then every reply's final chunk."""
    n = len(replies)
    parts = [partition_for(cid, PARTITIONS) for cid, _ in replies]
    keys = [cid.encode() for cid, _ in replies]
    step = 1.0 / (rate * n)
    began = time.time()
    j = 0
    total = chunks * n
    while j < total:
        now = time.time()
        due = int((now - began) / step) + 1
        while j < min(due, total):
            i, seq = j % n, j // n
            stamp = int(time.time() * 1e6)
            producer.produce(topic, replies[i][1].chunk(seq, f"{stamp} ", stamp), key=keys[i], partition=parts[i])
            j += 1
        producer.poll(0)
        if j < total:
            time.sleep(max(0.0, began + j * step - time.time()))
    for i, (_, writer) in enumerate(replies):
        producer.produce(topic, writer.final(chunks, int(time.time() * 1e6), chunks), key=keys[i], partition=parts[i])
    producer.flush(30)


def run_step(
    stack: isolated.IsolatedStack, key: str, user_id: str, cids: list[str], rate: float, seconds: float, readers: int,
    pids: dict[str, int],
) -> Result:
    n = len(cids)
    chunks = max(1, round(rate * seconds))
    posts = [(cid, uuid.uuid4().hex) for cid in cids]
    replies = [(cid, ChunkWriter(cid, user_id, ids.reply_id(cid, client_id))) for cid, client_id in posts]
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PARLEY_TOPIC_PREFIX": stack.kafka.topic_prefix, "PARLEY_KAFKA_BOOTSTRAP": stack.kafka.bootstrap}
        sample = max(1, int(n * rate) // 1000)  # ≤ ~1,000 decodes/s: the baseline must stay cheap
        baseline = _role(["--role", "baseline", "--out", f"{tmp}/baseline", "--sample", str(sample)], env)
        _expect_ready(baseline, "the baseline reader")
        deadline = seconds * 4 + 60
        procs = []
        share = (n + readers - 1) // readers
        for r in range(readers):
            mine = posts[r * share:(r + 1) * share]
            if not mine:
                continue
            proc = _role(["--role", "reader", "--url", stack.url, "--key", key, "--out", f"{tmp}/r{r}", "--deadline", str(deadline)])
            proc.stdin.write(json.dumps(mine) + "\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            procs.append(proc)
        for proc in procs:
            _expect_ready(proc, "a reader")
        watched = {**pids, "readers": 0, "baseline": baseline.pid, "producer (this process)": os.getpid()}

        def cpu_now() -> dict[str, float]:
            out = {name: cpu_seconds(pid) for name, pid in watched.items() if pid}
            out["readers"] = sum(cpu_seconds(p.pid) for p in procs)
            out["machine"] = machine_busy_seconds()
            return out

        producer = Producer(producer_config(stack.kafka))  # as the workers produce chunks (parley.kafka)
        gateway = pids["gateway"]
        before, began, waited = cpu_now(), time.monotonic(), waited_seconds(gateway)
        _produce(producer, stack.kafka.topic(TOKENS), replies, rate, chunks)
        summaries = [json.loads(proc.stdout.readline() or "{}") for proc in procs]  # type: ignore[union-attr]
        elapsed = time.monotonic() - began
        after = cpu_now()
        waited = waited_seconds(gateway) - waited
        baseline.stdin.close()  # type: ignore[union-attr]
        baseline.wait(30)
        for proc in procs:
            proc.wait(30)
        lags = array.array("d")
        for r in range(len(procs)):
            lags.frombytes(Path(f"{tmp}/r{r}").read_bytes())
        base = array.array("d", Path(f"{tmp}/baseline").read_bytes())
    counts = [c for s in summaries for c in s.get("counts", [])]
    return Result(
        n=n,
        lags=lags,
        baseline=base,
        delivered=sum(counts),
        deltas=sum(s.get("deltas", 0) for s in summaries),
        expected=chunks * n,
        wrong_streams=sum(1 for c in counts if c != chunks) + (n - len(counts)),
        disorder=sum(s.get("disorder", 0) for s in summaries),
        failed=sum(s.get("failed", 0) for s in summaries) + n - sum(s.get("ended", 0) + s.get("failed", 0) for s in summaries),
        seconds=elapsed,
        cpu={name: (after[name] - before[name]) / elapsed for name in after},
        gateway_waited=waited / elapsed,
    )


def report(r: Result) -> None:
    ms = 1000.0
    g50, g99 = pct(r.lags.tolist(), 0.5), pct(r.lags.tolist(), 0.99)
    b50, b99 = pct(r.baseline.tolist(), 0.5), pct(r.baseline.tolist(), 0.99)
    gateway = r.cpu.get("gateway", 0.0)
    per_chunk = gateway * r.seconds / r.delivered * 1e6 if r.delivered else float("nan")
    print(
        f"N={r.n:<5d} {r.delivered / r.seconds:7.0f} chunks/s   lag p50 {g50 * ms:7.1f} ms  p99 {g99 * ms:7.1f} ms   "
        f"(baseline p50 {b50 * ms:5.1f}  p99 {b99 * ms:5.1f}; ratio p50 x{g50 / b50:5.1f}  p99 x{g99 / b99:5.1f})   "
        f"gateway {gateway:4.2f} cores (+{r.gateway_waited:4.2f} waiting for one), {per_chunk:5.1f} µs/chunk   "
        f"{r.deltas / r.delivered if r.delivered else 0:4.2f} deltas/chunk   "
        f"streams wrong {r.wrong_streams}, out of order {r.disorder}, failed {r.failed}",
        flush=True,
    )
    busy = sorted(((n, c) for n, c in r.cpu.items() if n not in ("gateway", "machine") and c > 0.005), key=lambda kv: -kv[1])
    print(
        f"        machine {r.cpu.get('machine', 0.0):.2f} of {os.cpu_count()} cores busy; other CPU (cores): "
        + ", ".join(f"{n} {c:.2f}" for n, c in busy),
        flush=True,
    )


# ------------------------------------------------------------------ the run


def passed(r: Result) -> bool:
    return pct(r.lags.tolist(), 0.99) < LAG_BAR_S and not r.wrong_streams and not r.failed


def knee(results: list[Result]) -> Result | None:
    """The largest step that met the bar with every smaller step meeting it too, or saying nothing: a step whose
    baseline missed the bar as well is the machine stalling every reader, not the gateway. (A lucky step above
    one the gateway failed is noise, not capacity.)"""
    best = None
    for r in sorted(results, key=lambda r: r.n):
        if passed(r):
            best = r
        elif pct(r.baseline.tolist(), 0.99) < LAG_BAR_S:
            break
    return best


def record_knee(results: list[Result], rate: float) -> None:
    """bench/results/fanout.json: the streams per gateway process the capacity planner sizes gateways by."""
    k = knee(results)
    if k is None:
        print("no step met the bar before the gateway missed it: bench/results/fanout.json not written", flush=True)
        return
    record(
        "fanout",
        {
            "streams_per_gateway": k.n,
            "chunks_per_stream_per_s": rate,
            "chunks_per_s": k.delivered / k.seconds,
            "lag_p99_ms": pct(k.lags.tolist(), 0.99) * 1000,
            "gateway_cores": k.cpu.get("gateway", 0.0),
            "gateway_us_per_chunk": k.cpu.get("gateway", 0.0) * k.seconds / k.delivered * 1e6 if k.delivered else 0.0,
            "gateway_waiting_for_a_core": k.gateway_waited,
            "machine_cores_busy": k.cpu.get("machine", 0.0),
        },
        baseline={"lag_p99_ms": pct(k.baseline.tolist(), 0.99) * 1000, "lag_bar_ms": LAG_BAR_S * 1000},
        command=this_command(),
    )


async def _conversations(url: str, key: str, n: int) -> list[str]:
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=60) as http:
        gate = asyncio.Semaphore(32)

        async def one() -> str:
            async with gate:
                r = await http.post("/v1/conversations", json={})
                r.raise_for_status()
                return r.json()["id"]

        return list(await asyncio.gather(*(one() for _ in range(n))))


def shared_processes() -> dict[str, int]:
    return {f"{s.name} (shared)": s.pid for s in infra_stack.status(from_env(LocalInfraSettings)) if s.pid}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", default="100,500,1000,2000", help="concurrent SSE streams per step, comma-separated")
    parser.add_argument("--rate", type=float, default=30.0, help="chunks per second per stream")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each step produces chunks")
    parser.add_argument("--readers", type=int, default=2, help="SSE reader processes")
    parser.add_argument("--role", choices=("reader", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=120.0, help=argparse.SUPPRESS)
    parser.add_argument("--sample", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "reader":
        return reader_role(args.url, args.key, args.out, args.deadline)
    if args.role == "baseline":
        return baseline_role(args.out, args.sample)
    steps = [int(s) for s in args.streams.split(",")]
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "fanout")
    with tempfile.TemporaryDirectory() as logs:
        stack = isolated.start(kafka, cassandra, Path(logs), services=(GATEWAY,))
        try:
            user_id, key = stack.create_user("fanout", "enterprise")  # no quota
            pids = {"gateway": stack.supervisor.children[0].process.pid, **shared_processes()}
            cids = asyncio.run(_conversations(stack.url, key, max(steps)))
            random.shuffle(cids)
            run_step(stack, key, user_id, cids[:10], args.rate, 1.0, 1, pids)  # warm-up: assignments, connections
            print(f"{args.rate:g} chunks/s per stream for {args.seconds:g} s, one gateway process; "
                  f"target: N=2000 lag p99 < {LAG_BAR_S * 1000:.0f} ms", flush=True)
            results = []
            for n in steps:
                result = run_step(stack, key, user_id, cids[:n], args.rate, args.seconds, args.readers, pids)
                report(result)
                results.append(result)
            ok = [r.n for r in results if passed(r)]
            print(f"streams with lag p99 < {LAG_BAR_S * 1000:.0f} ms and every chunk delivered: "
                  f"{', '.join(map(str, ok)) or 'none of the steps'}")
            record_knee(results, args.rate)
        finally:
            stack.stop()
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
