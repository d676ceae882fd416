"""Incremental detokenization and stop strings, the way SGLang's DetokenizerManager does it.

The text a request reports is cumulative and must only ever grow, so that a
client can turn it into deltas. Two things would break that if sent as soon as
decoded: a multi-byte character split across tokens (decodes to U+FFFD until
its last byte arrives), and the start of a stop string (which is cut from the
reply once complete). Both are held back until they resolve or the request
finishes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

REPLACEMENT = "\ufffd"


class IncrementalText:
    def __init__(self, decode: Callable[[Sequence[int]], str], stop: tuple[str, ...] = (), keep_stop: bool = False):
        self._decode = decode
        self._stop = stop
        self._keep_stop = keep_stop
        self._decoded = ""  # everything decoded so far, stop strings not yet cut
        self._surr = 0  # SGLang's surr_offset / read_offset: re-decode from surr for context
        self._read = 0
        self.text = ""  # what may be sent: grows only
        self.matched: str | None = None  # the stop string that ended the reply
        self._cut = 0  # where the matched stop string starts in the decoded text

    def update(self, ids: Sequence[int], final: bool = False) -> str:
        """Take the token ids generated so far; return the sendable cumulative text."""
        surr_text = self._decode(ids[self._surr : self._read])
        full = self._decode(ids[self._surr :])
        new = full[len(surr_text) :]
        if new and (final or not new.endswith(REPLACEMENT)):
            self._decoded += new
            self._surr, self._read = self._read, len(ids)
        elif final:
            self._decoded += new
        self._apply_stop(final)
        return self.text

    def _apply_stop(self, final: bool) -> None:
        if self.matched is None:
            for s in self._stop:
                i = self._decoded.find(s)
                if i != -1 and (self.matched is None or i < self._cut):
                    self.matched, self._cut = s, i
            if self.matched is not None:
                end = self._cut + (len(self.matched) if self._keep_stop else 0)
                self.text = self._decoded[:end]
                return
        else:
            return
        visible = self._decoded if final else self._decoded[: len(self._decoded) - self._partial_stop()]
        if len(visible) > len(self.text):
            self.text = visible

    def _partial_stop(self) -> int:
        """Length of the longest tail of the decoded text that starts some stop string."""
        longest = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._decoded)), longest, -1):
                if self._decoded.endswith(s[:n]):
                    longest = n
                    break
        return longest
