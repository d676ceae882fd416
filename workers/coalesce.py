"""Engine deltas → TokenChunk pieces, pure and driven by the caller's clock.

An engine yields a delta per token or so; a Kafka record per token would
multiply the load on chat.tokens and on every gateway reading it. So the
first text goes out at once (time to first token is what users feel), and
after that text is held until ``max_tokens`` accumulated or ``max_delay_s``
passed since the previous piece went out. The caller asks ``due_at`` when
to come back if no delta arrives, so held text never waits longer than that.

This adapts to the stream's rate by construction: a stream slower than one
token per window is never held (each delta arrives after the window closed
and goes out at once); at 30 tokens/s an 80 ms window carries 2–3 tokens per
chunk, which a reader cannot tell from one every 33 ms; a fast stream (a GPU
at 200 tokens/s, speculative decoding) is cut by ``max_tokens`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """The content of one TokenChunk."""

    seq: int  # 0, 1, 2… within the attempt
    text: str  # the delta
    tokens: int  # tokens the delta carries
    offset_chars: int  # characters (code points) of the reply before this delta


class Coalescer:
    def __init__(self, max_delay_s: float, max_tokens: int, start_chars: int = 0) -> None:
        self._max_delay = max_delay_s
        self._max_tokens = max_tokens
        self._text: list[str] = []
        self._tokens = 0
        self._last_emit: float | None = None  # None: nothing went out yet
        self.next_seq = 0
        #: Characters of the reply already emitted (a resumed attempt starts after its resume text).
        self.chars = start_chars

    @property
    def held(self) -> bool:
        return bool(self._text)

    @property
    def due_at(self) -> float | None:
        """When held text must go out at the latest; None when nothing is held."""
        if not self._text:
            return None
        if self._last_emit is None:
            return float("-inf")  # the first text is due at once
        return self._last_emit + self._max_delay

    def add(self, text: str, tokens: int, now: float) -> Piece | None:
        """Take one delta; returns the piece to send now, if any."""
        if text:
            self._text.append(text)
        self._tokens += tokens
        if not self._text:
            return None  # tokens without text (e.g. a stop token) ride with the next text
        if self._last_emit is None or self._tokens >= self._max_tokens or now >= self.due_at:  # type: ignore[operator]
            return self._emit(now)
        return None

    def poll(self, now: float) -> Piece | None:
        """The held text if it is due; call when ``due_at`` passes without a delta."""
        due = self.due_at
        if due is not None and now >= due:
            return self._emit(now)
        return None

    def flush(self, now: float) -> Piece | None:
        """Whatever text is held, due or not (the stream ended)."""
        return self._emit(now) if self._text else None

    def _emit(self, now: float) -> Piece:
        text = "".join(self._text)
        piece = Piece(seq=self.next_seq, text=text, tokens=self._tokens, offset_chars=self.chars)
        self.next_seq += 1
        self.chars += len(text)
        self._text.clear()
        self._tokens = 0
        self._last_emit = now
        return piece
