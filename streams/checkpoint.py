"""Checkpoints of streaming replies: ``chat.tokens`` → the partial text to persist.

Pure and driven by the caller's clock (like ``workers.coalesce``): the
materializer hands every TokenChunk to ``Checkpointer.take`` and calls
``due`` on a timer; both return the ``Checkpoint``s to write now. A reply's
text is rebuilt from its chunks (``seq`` orders them within an attempt,
``offset_chars`` says where a resumed attempt starts); it is written when it
first appears, then at most every ``min_interval_s``, and the timer's period
keeps pending text from waiting longer than the caller's maximum.

A checkpoint writes only ``role``, ``content``, ``tokens`` and ``updated_at``,
at the newest included chunk's ``occurred_at`` minus 1 µs. The worker stamps
GenerationCompleted after every text chunk was acknowledged, so that
timestamp is strictly below the completion's and the completion's content
wins in Cassandra whichever write lands (or is replayed) last. ``status``
is never written: a checkpoint cannot move a finished reply back to
``streaming``. ``role`` is written (always ``assistant`` for a reply) so a
checkpoint that lands before the GenerationRequested row never leaves a row
without one.

Memory is bounded: replies whose final chunk went by are forgotten (only their
key is kept, in a bounded set, to ignore a late chunk of a superseded
attempt); the least recently active live replies are dropped beyond
``max_live``.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from schemas.events import TokenChunk
from schemas import sealing
from streams.projection import Write, sealed, to_time, to_uuid
from streams.tree import FINAL_STATUSES

#: (conversation_id, request_id) of a reply.
Key = tuple[str, str]


@dataclass(frozen=True)
class Checkpoint:
    """The partial text of one reply, to write as it stands."""

    conversation_id: str
    request_id: str
    content: str
    tokens: int
    timestamp: int  # µs: newest included chunk's occurred_at - 1
    user_id: str = ""  # the reply's owner, whose key seals the text

    def write(self, sealer: sealing.Sealer) -> Write:
        key = (("conversation_id", to_uuid(self.conversation_id)), ("message_id", to_uuid(self.request_id)))
        cells = (
            ("role", "assistant"),
            ("content", self.content),
            ("tokens", self.tokens),
            ("updated_at", to_time(self.timestamp)),
        )
        return sealed(Write("messages", key, cells, self.timestamp), self.user_id, sealer)


@dataclass(frozen=True)
class StoredReply:
    """A reply's row as the table has it (to resume after a restart)."""

    content: str
    tokens: int
    status: str


@dataclass
class _Reply:
    attempt: int
    next_seq: int
    text: str = ""
    #: (characters, tokens) after each chunk, so a resumed attempt that keeps a
    #: prefix keeps the token count of the chunks it keeps whole.
    marks: list[tuple[int, int]] = field(default_factory=list)
    newest_at: int = 0  # occurred_at of the newest chunk taken
    version: int = 0  # raised on every change of text or tokens
    written_version: int = 0
    written_at: float | None = None  # caller's clock at the last write; None: write at once
    #: Its beginning is unknown (chunks missed): nothing can be written until it ends.
    blind: bool = False
    user_id: str = ""

    @property
    def tokens(self) -> int:
        return self.marks[-1][1] if self.marks else 0

    def keep(self, chars: int) -> None:
        """Keep the first ``chars`` characters (a resumed attempt continues from there)."""
        if chars == len(self.text):
            return
        self.text = self.text[:chars]
        self.marks = [m for m in self.marks if m[0] <= chars]
        self.version += 1

    def append(self, chunk: TokenChunk) -> None:
        if chunk.text or chunk.tokens:
            self.text += chunk.text
            self.marks.append((len(self.text), self.tokens + chunk.tokens))
            self.version += 1
        self.next_seq = chunk.seq + 1
        self.newest_at = chunk.occurred_at


def _key(chunk: TokenChunk) -> Key:
    # Validated here, at the record: a malformed id must dead-letter this
    # record, not fail a timer's write later.
    uuid.UUID(chunk.conversation_id)
    uuid.UUID(chunk.request_id)
    return chunk.conversation_id, chunk.request_id


class Checkpointer:
    """Live replies' text and when each is due to be written."""

    def __init__(self, min_interval_s: float, max_live: int, max_finished: int) -> None:
        if min_interval_s < 0 or max_live <= 0 or max_finished <= 0:
            raise ValueError("min_interval_s must be ≥ 0 and the bounds positive")
        self._min = min_interval_s
        self._max_live = max_live
        self._max_finished = max_finished
        self._live: OrderedDict[Key, _Reply] = OrderedDict()
        self._dirty: dict[Key, None] = {}  # live replies with text not yet written, oldest first
        self._finished: OrderedDict[Key, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def needs_prefix(self, chunk: TokenChunk) -> bool:
        """Whether ``chunk`` continues a reply whose beginning this instance never saw.

        That happens after a restart or a rebalance; the caller then reads the
        reply's row and hands it to ``seed``, so checkpoints resume from the
        last one written instead of stopping until the reply ends.
        """
        key = _key(chunk)
        return (
            key not in self._live
            and key not in self._finished
            and chunk.finish_reason is None
            and chunk.offset_chars > 0
        )

    def seed(self, chunk: TokenChunk, stored: StoredReply | None) -> None:
        """Start following ``chunk``'s reply from its stored row (see ``needs_prefix``)."""
        key = _key(chunk)
        if stored is not None and stored.status in FINAL_STATUSES:
            self._finish(key)  # a late chunk of a reply that already ended
            return
        if stored is None or len(stored.content) < chunk.offset_chars:
            self._track(key, _Reply(chunk.attempt, chunk.seq, user_id=chunk.user_id, blind=True))
            return
        prefix = stored.content[: chunk.offset_chars]
        # The row's token count covers its whole content; prorate it to the prefix kept.
        tokens = stored.tokens if len(stored.content) == len(prefix) else stored.tokens * len(prefix) // len(stored.content)
        self._track(key, _Reply(chunk.attempt, chunk.seq, user_id=chunk.user_id, text=prefix, marks=[(len(prefix), tokens)]))

    def take(self, chunk: TokenChunk, now: float) -> Checkpoint | None:
        """Fold ``chunk`` in; the checkpoint to write now, if one is due."""
        key = _key(chunk)
        if key in self._finished:
            return None
        if chunk.finish_reason is not None:  # GenerationCompleted, already produced, has the whole text
            self._finish(key)
            return None
        reply = self._live.get(key)
        if reply is None:
            reply = _Reply(chunk.attempt, chunk.seq, user_id=chunk.user_id, blind=chunk.offset_chars > 0)
        elif chunk.attempt < reply.attempt:
            return None  # superseded attempt
        elif chunk.attempt > reply.attempt:
            reply = self._resumed(reply, chunk)
        elif chunk.seq < reply.next_seq:
            return None  # redelivered
        elif reply.blind or chunk.seq > reply.next_seq or chunk.offset_chars != len(reply.text):
            reply.blind = True  # a gap: the text in between is unknown
        if reply.blind:
            self._track(key, reply)
            return None
        reply.append(chunk)
        self._track(key, reply)
        if reply.version == reply.written_version:
            return None
        self._dirty[key] = None
        if reply.written_at is None or now - reply.written_at >= self._min:
            return self._write(key, reply, now)
        return None

    def due(self, now: float, *, force: bool = False) -> list[Checkpoint]:
        """Checkpoints of pending text whose reply may be written again (every pending one if ``force``)."""
        out = []
        for key in list(self._dirty):
            reply = self._live[key]
            if force or reply.written_at is None or now - reply.written_at >= self._min:
                out.append(self._write(key, reply, now))
        return out

    # ------------------------------------------------------------ internals

    def _resumed(self, old: _Reply, chunk: TokenChunk) -> _Reply:
        if chunk.offset_chars == 0:
            # Starts over from nothing; still paced by the previous write.
            return _Reply(chunk.attempt, chunk.seq, user_id=chunk.user_id, written_at=old.written_at)
        if old.blind or chunk.seq != 0 or chunk.offset_chars > len(old.text):
            return _Reply(chunk.attempt, chunk.seq, user_id=chunk.user_id, blind=True)
        old.keep(chunk.offset_chars)
        old.attempt, old.next_seq = chunk.attempt, chunk.seq
        return old

    def _write(self, key: Key, reply: _Reply, now: float) -> Checkpoint:
        reply.written_version, reply.written_at = reply.version, now
        self._dirty.pop(key, None)
        return Checkpoint(key[0], key[1], reply.text, reply.tokens, reply.newest_at - 1, reply.user_id)

    def _track(self, key: Key, reply: _Reply) -> None:
        self._live[key] = reply
        self._live.move_to_end(key)
        while len(self._live) > self._max_live:
            # Its worker died without a final chunk, most likely; its row keeps the last checkpoint.
            old, _ = self._live.popitem(last=False)
            self._dirty.pop(old, None)

    def _finish(self, key: Key) -> None:
        self._live.pop(key, None)
        self._dirty.pop(key, None)
        self._finished[key] = None
        self._finished.move_to_end(key)
        while len(self._finished) > self._max_finished:
            self._finished.popitem(last=False)
