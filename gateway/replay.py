"""A resume read on a consumer of its own, so that the shared token reader never moves for it.

gateway/tokens.py serves every live stream of a process from one consumer and seeks it back for a
resume. A resume far behind the partition's end (an old reply rewound, a reply left "streaming" for
hours by a lost worker) would make every other stream on that partition wait while the shared reader
re-reads up to a day of records. Such a resume, and every resume of a finished reply, is read here
instead: the cost of a deep rewind falls on the one stream that asked for it.

A finished reply's replay is bounded by the partition's end noted when it opened (``until``), which
the reply's chunks all lie before: ``None`` on the queue says the bound was reached, and if the last
chunk did not come first, the cursor was already past it. A live reply's replay follows the reply
until its last chunk (replies.live then closes the stream), as the shared reader would.
"""

from __future__ import annotations

import asyncio
import logging

from confluent_kafka import Consumer, KafkaError, TopicPartition

from gateway import chunk_reader
from gateway.tokens import BATCH, TOKENS, Chunk, Stream
from parley.consumer import DEFAULT_MAX_EVENT_BYTES, poll_batch, reader
from parley.settings import KafkaSettings
from schemas import codec
from schemas.events import TokenChunk

log = logging.getLogger(__name__)

#: How long one poll of the replay's consumer waits for a record before the stream's state is looked at again.
POLL_S = 0.25


def open_replay(settings: KafkaSettings, request_id: str, partition: int, from_offset: int, until: int | None) -> Stream:
    """A stream of ``request_id``'s chunks at or after ``from_offset``, fed by a consumer of its own until the
    reply's last chunk, the stream's close, or (``until`` given) offset ``until``. Close it with
    ``TokenStreams.close_stream`` as any other (which only marks it closed: the pump sees that)."""
    stream = Stream(request_id, partition, from_offset)
    consumer = reader(settings, "gateway-replay", auto_offset_reset="earliest", enable_partition_eof=until is not None)
    consumer.assign([TopicPartition(settings.topic(TOKENS), partition, from_offset)])
    task = asyncio.get_running_loop().create_task(_pump(consumer, stream, until))
    task.add_done_callback(_log_failure)
    return stream


async def _pump(consumer: Consumer, stream: Stream, until: int | None) -> None:
    try:
        while not stream.closed:
            chunks, ended = await asyncio.to_thread(_read, consumer, stream, until)
            for chunk in chunks:
                stream.last_offset = chunk.offset
                stream.queue.put_nowait(chunk)
            if ended:
                # The bound: after the reply's last chunk nobody reads this; without it, the cursor was past it.
                stream.queue.put_nowait(None)
                return
    finally:
        await asyncio.to_thread(consumer.close)


def _read(consumer: Consumer, stream: Stream, until: int | None) -> tuple[list[Chunk], bool]:
    """The stream's chunks in what one poll brings (decoded here, off the loop); and whether the replay ended."""
    wanted = {stream.request_id}
    chunks: list[Chunk] = []
    for msg in poll_batch(consumer, BATCH, POLL_S):
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return chunks, True  # only asked for with a bound: the partition's end, past every chunk of the reply
            continue
        offset = msg.offset()
        if until is not None and offset >= until:
            return chunks, True
        value = msg.value()
        if offset < stream.from_offset or (value is not None and len(value) > DEFAULT_MAX_EVENT_BYTES):
            continue
        try:
            event = chunk_reader.read(value, wanted)
        except codec.CodecError:
            continue  # the producers' consumers dead-letter it; a reader only skips it (as gateway/tokens.py)
        if isinstance(event, TokenChunk) and event.request_id == stream.request_id:
            chunks.append(Chunk(event, msg.partition(), offset))  # replies.live ends at the last chunk, closing us
    return chunks, False


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("a replay's reader failed", extra={"error": type(task.exception()).__name__})
