"""Materializer: ``chat.events`` → the Cassandra tables ``conversations``,
``conversations_by_user``, ``messages`` (and ``summaries``); ``chat.tokens`` →
checkpoints of streaming replies' text in ``messages``.

For each event: the conversation's state before it (memory, else the rows
already written), the writes ``streams.projection`` derives, executed until
Cassandra takes them, then the state after it. A record is acknowledged only
once its writes are in, so an outage stalls the projection and loses nothing;
since every write is timestamped by its event, the rows redelivered after a
crash are rewritten identically.

Checkpoints (``streams.checkpoint``) run as a second agent of the same app:
both topics are keyed and partitioned alike, so a conversation's events and
chunks land on the same instance, and the DESIGN topology has the materializer
write them. Its own agent keeps token traffic from delaying ``chat.events``
rows, which the context builder waits for. A checkpoint's text may wait in
memory up to PARLEY_MATERIALIZER_CHECKPOINT_MAX_S after its chunk was
acknowledged; a restart loses at most that, and resumes from the row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from schemas import events as ev, sealing
from parley.lru import LRU
from parley.retry import retrying
from streams.checkpoint import Checkpoint, Checkpointer, StoredReply
from streams.projection import PROJECTION, Write, writes_for
from streams.settings import MaterializerSettings
from streams.tree import Conversation, apply

log = logging.getLogger(__name__)

class TreeStore(Protocol):
    async def load(self, conversation_id: str) -> Conversation: ...

    async def write(self, writes: list[Write]) -> None: ...


class ReplyStore(Protocol):
    async def reply(self, conversation_id: str, message_id: str) -> StoredReply | None: ...

    async def write(self, writes: list[Write]) -> None: ...


class Materializer:
    """Per-conversation states and the writes of each event (no Kafka in here)."""

    def __init__(self, cfg: MaterializerSettings, store: TreeStore, sealer: sealing.Sealer) -> None:
        self.cfg = cfg
        self._store = store
        self._sealer = sealer
        self._states: LRU[str, Conversation] = LRU(cfg.cache_conversations)

    async def handle(self, event: ev.Event) -> list[Write]:
        """Write what ``event`` changes; returns the writes (for tests and metrics).

        Raises ValueError for an event whose ids are malformed (nothing written).
        """
        if type(event) not in PROJECTION:
            return []
        cid = str(getattr(event, "conversation_id"))
        state = self._states.get(cid)
        if state is None:
            state = await retrying("loading a conversation", lambda: self._store.load(cid), self.cfg.retry_max_s)
        writes = writes_for(state, event, self._sealer)
        if writes:
            await retrying("writing an event's rows", lambda: self._store.write(writes), self.cfg.retry_max_s)
        self._states.put(cid, apply(state, event))
        return writes


class Checkpoints:
    """TokenChunks → checkpoint writes (no Kafka in here); ``flush`` is the timer's half."""

    def __init__(
        self, cfg: MaterializerSettings, store: ReplyStore, sealer: sealing.Sealer, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cfg = cfg
        self._store = store
        self._sealer = sealer
        self._clock = clock
        # Finished keys outnumber live ones: a superseded attempt's late chunk may come long after.
        self.checkpointer = Checkpointer(cfg.checkpoint_min_s, cfg.live_replies, 4 * cfg.live_replies)

    async def handle(self, event: ev.Event) -> list[Write]:
        """Fold a TokenChunk in and write the checkpoint due now, if any.

        Raises ValueError for a chunk whose ids are malformed, TypeError for another event type.
        """
        if not isinstance(event, ev.TokenChunk):
            raise TypeError(f"unexpected {type(event).__name__} on chat.tokens")
        if self.checkpointer.needs_prefix(event):
            cid, rid = event.conversation_id, event.request_id
            stored = await retrying("reading a reply", lambda: self._store.reply(cid, rid), self.cfg.retry_max_s)
            self.checkpointer.seed(event, stored)
        due = self.checkpointer.take(event, self._clock())
        return await self._write([due] if due else [])

    async def flush(self, *, force: bool = False) -> list[Write]:
        """Write the pending text that is due (all of it when ``force``: shutdown, rebalance)."""
        return await self._write(self.checkpointer.due(self._clock(), force=force))

    async def _write(self, checkpoints: list[Checkpoint]) -> list[Write]:
        writes = [c.write(self._sealer) for c in checkpoints]
        if writes:
            await retrying("writing checkpoints", lambda: self._store.write(writes), self.cfg.retry_max_s)
        return writes
