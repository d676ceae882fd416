"""Reads ``chat.tokens`` for the streams this gateway process serves, and fans chunks out.

One consumer per process, outside any consumer group: it is assigned only the
partitions of its live streams. A stream is opened *before* its request is
appended, at the partition's end offset noted then (``note_end``), so no chunk
of the reply can be missed; a replay (resume) opens at an earlier offset and
the partition is sought back to it, while streams already past that offset
ignore what they have seen. Chunks are matched to streams by request id.

The reader never seeks forward: a stream that opens ahead of where the
partition is being read waits for the reader to get there, because streams
opened earlier still need what lies in between. Where the reader is comes from
its own count (``_next``: set by each assign and seek, moved by each record),
not from ``Consumer.position``, which knows nothing until the first record
after an assign arrives; reading that as "far ahead" once made the reader seek
a second new stream's offset and skip the first stream's opening chunks.

The consumer runs in a thread (confluent-kafka blocks); chunks cross into the
event loop with ``call_soon_threadsafe``. Assignment changes are queued to that
thread so only it touches the consumer.

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

from confluent_kafka import KafkaException, TopicPartition

from parley.consumer import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, reader
from gateway.log_ends import LogEnds
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


@dataclass(frozen=True)
class Chunk:
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
    queue: asyncio.Queue[Chunk] = field(default_factory=asyncio.Queue)
    last_offset: int = -1  # offsets at or below this were delivered already
    closed: bool = False


class TokenStreams:
    def __init__(self, settings: KafkaSettings, shard: Shard | None = None, borrowed_idle_s: float = 2.0) -> None:
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
        self._streams: dict[str, set[Stream]] = defaultdict(set)  # request_id → streams
        self._by_partition: dict[int, set[Stream]] = defaultdict(set)
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
        with self._lock:
            stream.closed = True
            self._streams[stream.request_id].discard(stream)
            if stream.request_id in self._streams and not self._streams[stream.request_id]:
                del self._streams[stream.request_id]
            self._by_partition[stream.partition].discard(stream)

    # ------------------------------------------------------------ consumer thread

    def _run(self) -> None:
        while not self._stop.is_set():
            self._apply_commands()
            self._unassign_idle()  # on a clock, not only when a poll comes back empty: a busy reader never idles
            try:
                msg = self._consumer.poll(0.05)
            except KafkaException as exc:  # pragma: no cover - broker trouble is retried by librdkafka
                log.warning("token consumer error", extra={"error": str(exc)})
                self.healthy = False
                time.sleep(0.5)
                continue
            if msg is None:
                continue
            if msg.error():
                self.healthy = not msg.error().fatal()
                continue
            self.healthy = True
            self._read[msg.partition()].inc()
            if msg.partition() in self._next:
                self._next[msg.partition()] = msg.offset() + 1
            self._dispatch(msg.partition(), msg.offset(), msg.value())

    def _apply_commands(self) -> None:
        while True:
            try:
                _, stream = self._commands.get_nowait()
            except queue.Empty:
                return
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
            with self._lock:
                if not stream.closed:
                    self._streams[stream.request_id].add(stream)
                    self._by_partition[partition].add(stream)

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

    def _dispatch(self, partition: int, offset: int, value: bytes | None) -> None:
        try:
            if value is not None and len(value) > DEFAULT_MAX_EVENT_BYTES:  # what the DLQ gets is never streamed
                raise EventTooLarge(f"record of {len(value)} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
            event = codec.decode(value)
        except codec.CodecError as exc:
            # The producers' consumers dead-letter it; a gateway only skips it.
            log.warning("skipping an undecodable token record", extra={"partition": partition, "offset": offset, "error": str(exc)})
            return
        if not isinstance(event, TokenChunk):
            return
        with self._lock:
            targets = [s for s in self._streams.get(event.request_id, ()) if offset >= s.from_offset and offset > s.last_offset]
            for s in targets:
                s.last_offset = offset
        if targets and self._loop is not None:
            chunk = Chunk(event, partition, offset)
            for s in targets:
                self._loop.call_soon_threadsafe(s.queue.put_nowait, chunk)
