"""Reads ``chat.tokens`` for the streams this gateway process serves, and fans chunks out.

One consumer per process, outside any consumer group: it is assigned only the
partitions of its live streams. A stream is opened *before* its request is
appended, at the partition's end offset noted then (``note_end``), so no chunk
of the reply can be missed; a replay (resume) opens at an earlier offset and
the partition is sought back to it, while streams already past that offset
ignore what they have seen. Chunks are matched to streams by request id, read
before the rest of the record (``gateway/chunk_reader.py``): another gateway's
chunks on the same partition are skipped undecoded.

The reader never seeks forward: a stream that opens ahead of where the
partition is being read waits for the reader to get there, because streams
opened earlier still need what lies in between. Where the reader is comes from
its own count (``_next``: set by each assign and seek, moved by each record),
not from ``Consumer.position``, which knows nothing until the first record
after an assign arrives; reading that as "far ahead" once made the reader seek
a second new stream's offset and skip the first stream's opening chunks.

The consumer runs in a thread (confluent-kafka blocks) that does as little as it
can: it applies assignment changes (queued to it, so only it touches the
consumer; a seek never lands inside a batch), takes what is already fetched (up
to ``BATCH`` records), keeps ``_next``, and hands the loop, with one
``call_soon_threadsafe``, the streams it just positioned and the batch, in that
order. Decoding, matching and queueing happen on the event loop, which sees
registrations and records in exactly the order the reader thread produced them,
so the rules above hold as if it all ran on one thread. Two reasons, both
measured (bench/fanout.py): a wake-up per chunk and stream (a write to the
loop's self-pipe) was a fifth of the process's time at 1,000 streams; and a
reader thread decoding thousands of records a second holds the GIL while the
loop, which gives it up at every socket write, waits for it back (the convoy
effect): the loop got 0.08 of a core and streams fell seconds behind.

A sharded gateway (``PARLEY_GATEWAY_SHARD``, parley/shards.py) gets the streams of
its own partitions from the edge; a stream of another partition (a resume through
a plain load balancer, its owner down) is served all the same, by *borrowing* the
partition: assigned on demand like any other, but given back
``PARLEY_GATEWAY_BORROWED_IDLE_S`` after its last stream ends instead of 30 s, so
strays cost a few seconds of reading that partition, not a steady share of it.
``parley_gateway_token_records_read_total{share}`` counts what is read.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import KafkaException, TopicPartition

from gateway import chunk_reader
from gateway.log_ends import LogEnds
from parley.consumer import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, poll_batch, reader
from parley.metrics import TOKEN_RECORDS_READ
from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from parley.shards import Shard, owns
from schemas import codec
from schemas.catalog import TOPICS
from schemas.events import TokenChunk

log = logging.getLogger(__name__)

TOKENS = "chat.tokens"
#: Owned partitions with no stream for this long are unassigned (a conversation's next turn comes
#: within it and finds its partition still assigned); borrowed ones after PARLEY_GATEWAY_BORROWED_IDLE_S.
IDLE_UNASSIGN_S = 30.0
#: How often idle partitions are looked for.
IDLE_CHECK_S = 0.25
#: Records taken from the consumer at once (only what is already fetched: a batch never waits to fill).
BATCH = 500


class Chunk(NamedTuple):
    """A TokenChunk and its position: ``cursor`` is the SSE id (``partition:offset``)."""

    event: TokenChunk
    partition: int
    offset: int

    @property
    def cursor(self) -> str:
        return f"{self.partition}:{self.offset}"


@dataclass(eq=False)
class Stream:
    """One reader of one reply's chunks."""

    request_id: str
    partition: int
    from_offset: int
    #: Chunks in log order; None: stop now, the gateway's drain cut this stream (turns.read_live).
    queue: asyncio.Queue[Chunk | None] = field(default_factory=asyncio.Queue)
    last_offset: int = -1  # offsets at or below this were delivered already
    closed: bool = False


class TokenStreams:
    def __init__(self, settings: KafkaSettings, shard: Shard | None = None, borrowed_idle_s: float = 2.0) -> None:
        self.kafka = settings  # what a replay of its own connects with (gateway/replay.py)
        self._topic = settings.topic(TOKENS)
        self._partitions = TOPICS[TOKENS].partitions
        self.shard = shard
        # Per partition: how long it may sit idle before it is unassigned, and the counter its records go to.
        self._idle_bound = {p: IDLE_UNASSIGN_S if owns(shard, p) else borrowed_idle_s for p in range(self._partitions)}
        self._read = {p: TOKEN_RECORDS_READ.labels("owned" if owns(shard, p) else "borrowed") for p in range(self._partitions)}
        self._idle_checked = 0.0
        # Latency over batching: these are live token streams.
        self._consumer = reader(settings, "gateway-tokens", fetch_wait_max_ms=10, fetch_min_bytes=1)
        # End offsets are asked by a client of their own (a consumer blocked in poll() on the reader
        # thread also blocks other calls on it), for every waiting reply at once (gateway/log_ends.py).
        self._meta = reader(settings, "gateway-tokens-meta")
        self._ends = LogEnds(self._meta, self._topic)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, set[Stream]] = defaultdict(set)  # request_id → streams (the loop's alone)
        self._by_partition: dict[int, set[Stream]] = defaultdict(set)  # under _lock: positioned, not closed (idle check)
        self._assigned: dict[int, float] = {}  # partition → when it last had no streams (0: has some)
        self._next: dict[int, int] = {}  # assigned partition → the offset of the next record the reader gets
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-tokens", daemon=True)
        self.healthy = True

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close()
        self._meta.close()

    def partition_of(self, conversation_id: str) -> int:
        return partition_for(conversation_id, self._partitions)

    async def note_end(self, partition: int) -> int:
        """The partition's end offset now: a reply appended after this has its chunks at or after it."""
        return await self._ends.end_of(partition)

    def open(self, request_id: str, partition: int, from_offset: int) -> Stream:
        """A stream of ``request_id``'s chunks at or after ``from_offset``.

        It starts receiving only once the reader thread has positioned the partition
        for it: registered any earlier, a live chunk could reach it first and make it
        skip the older chunks a replay is about to read again.
        """
        if from_offset < 0:
            raise ValueError(f"a stream opens at a real offset, not {from_offset}")
        stream = Stream(request_id, partition, from_offset)
        self._commands.put(("open", stream))
        return stream

    def close_stream(self, stream: Stream) -> None:
        """Stop ``stream`` (on the event loop, as everything that reads or changes ``_streams``)."""
        with self._lock:  # against the reader thread marking its partition busy (_apply_commands)
            stream.closed = True
            self._by_partition[stream.partition].discard(stream)
        streams = self._streams.get(stream.request_id)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._streams[stream.request_id]

    # ------------------------------------------------------------ consumer thread

    def _run(self) -> None:
        while not self._stop.is_set():
            opened = self._apply_commands()
            self._unassign_idle()  # on a clock, not only when a poll comes back empty: a busy reader never idles
            try:
                batch = poll_batch(self._consumer, BATCH, 0.05)
            except KafkaException as exc:  # pragma: no cover - broker trouble is retried by librdkafka
                log.warning("token consumer error", extra={"error": str(exc)})
                self.healthy = False
                if opened and self._loop is not None:
                    self._loop.call_soon_threadsafe(self._on_loop, opened, [])
                time.sleep(0.5)
                continue
            records: list[tuple[int, int, bytes | None]] = []
            read: dict[int, int] = defaultdict(int)
            for msg in batch:
                error = msg.error()
                if error:
                    self.healthy = not error.fatal()
                    continue
                self.healthy = True
                partition, offset = msg.partition(), msg.offset()
                read[partition] += 1
                if partition in self._next:
                    self._next[partition] = offset + 1
                records.append((partition, offset, msg.value()))
            for partition, count in read.items():
                self._read[partition].inc(count)
            if (opened or records) and self._loop is not None:
                self._loop.call_soon_threadsafe(self._on_loop, opened, records)

    def _apply_commands(self) -> list[Stream]:
        """Position the partitions of the streams opened since; those streams, in order."""
        opened: list[Stream] = []
        while True:
            try:
                _, stream = self._commands.get_nowait()
            except queue.Empty:
                return opened
            partition, offset = stream.partition, stream.from_offset
            tp = TopicPartition(self._topic, partition, offset)
            if partition not in self._assigned:
                self._consumer.incremental_assign([tp])
                self._next[partition] = offset
            elif offset < self._next[partition]:
                # Back to it (a replay, or a stream noted before records the reader already passed);
                # streams past it skip what they saw. seek() waits until prefetched records are purged.
                self._consumer.seek(tp)
                self._next[partition] = offset
            # else: the reader gets there on its own; nothing may be skipped for the streams before it.
            self._assigned[partition] = 0.0
            with self._lock:  # busy from now on (_unassign_idle); it gets records once the loop registers it
                if not stream.closed:
                    self._by_partition[partition].add(stream)
            opened.append(stream)

    def _unassign_idle(self) -> None:
        now = time.monotonic()
        if now - self._idle_checked < IDLE_CHECK_S:
            return
        self._idle_checked = now
        with self._lock:
            busy = {p for p, streams in self._by_partition.items() if streams}
        for partition, idle_since in list(self._assigned.items()):
            if partition in busy:
                self._assigned[partition] = 0.0
            elif idle_since == 0.0:
                self._assigned[partition] = now
            elif now - idle_since > self._idle_bound[partition]:
                self._consumer.incremental_unassign([TopicPartition(self._topic, partition)])
                del self._assigned[partition]
                del self._next[partition]

    # ------------------------------------------------------------ event loop

    def _on_loop(self, opened: list[Stream], records: list[tuple[int, int, bytes | None]]) -> None:
        """The streams the reader thread positioned, then the records it read after that."""
        for stream in opened:
            if not stream.closed:
                self._streams[stream.request_id].add(stream)
        for partition, offset, value in records:
            self._dispatch(partition, offset, value)

    def _dispatch(self, partition: int, offset: int, value: bytes | None) -> None:
        try:
            if value is not None and len(value) > DEFAULT_MAX_EVENT_BYTES:  # what the DLQ gets is never streamed
                raise EventTooLarge(f"record of {len(value)} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
            event = chunk_reader.read(value, self._streams)  # None: a chunk no stream here wants, left unread
        except codec.CodecError as exc:
            # The producers' consumers dead-letter it; a gateway only skips it.
            log.warning("skipping an undecodable token record", extra={"partition": partition, "offset": offset, "error": str(exc)})
            return
        if not isinstance(event, TokenChunk):
            return
        chunk: Chunk | None = None
        for s in self._streams.get(event.request_id, ()):
            if offset >= s.from_offset and offset > s.last_offset:
                s.last_offset = offset
                if chunk is None:
                    chunk = Chunk(event, partition, offset)
                s.queue.put_nowait(chunk)
