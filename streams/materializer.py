"""Materializer: ``chat.events`` → the Cassandra tables ``conversations``,
``conversations_by_user``, ``messages`` (and ``summaries``).

For each event: the conversation's state before it (memory, else the rows
already written), the writes ``streams.projection`` derives, executed until
Cassandra takes them, then the state after it. A record is acknowledged only
once its writes are in, so an outage stalls the projection and loses nothing;
since every write is timestamped by its event, the rows redelivered after a
crash are rewritten identically.
"""

from __future__ import annotations

import logging
from typing import Protocol

import faust

from parley.settings import KafkaSettings
from schemas import events as ev
from streams.app import decoded, raw_topic
from streams.lru import LRU
from streams.projection import PROJECTION, Write, writes_for
from streams.settings import MaterializerSettings, StreamsSettings
from streams.shell import dead_letter_current, processor_app
from streams.store import Store, retrying
from streams.tree import Conversation, apply

log = logging.getLogger(__name__)


class TreeStore(Protocol):
    async def load(self, conversation_id: str) -> Conversation: ...

    async def write(self, writes: list[Write]) -> None: ...


class Materializer:
    """Per-conversation states and the writes of each event (no Kafka in here)."""

    def __init__(self, cfg: MaterializerSettings, store: TreeStore) -> None:
        self.cfg = cfg
        self._store = store
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
        writes = writes_for(state, event)
        if writes:
            await retrying("writing an event's rows", lambda: self._store.write(writes), self.cfg.retry_max_s)
        self._states.put(cid, apply(state, event))
        return writes


def build_app(streams: StreamsSettings, kafka: KafkaSettings, cfg: MaterializerSettings, store: Store) -> faust.App:
    app, group = processor_app(streams, kafka, "materializer")
    source = raw_topic(app, kafka, "chat.events")
    materializer = Materializer(cfg, store)

    @app.agent(source, name="materializer")
    async def materialize(stream: faust.StreamT) -> None:
        async for event in decoded(app, stream, consumer=group):
            try:
                await materializer.handle(event)
            except ValueError as exc:  # an id that is not a UUID: no row can hold it
                await dead_letter_current(app, stream, group, exc)

    return app
