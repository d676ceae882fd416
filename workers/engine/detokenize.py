"""Incremental detokenization and stop strings, the way SGLang's DetokenizerManager does it.

Each update returns only the text that became sendable (a delta), so a reply of
n tokens costs O(n) in all, however it is streamed. Two things are held back
until they resolve or the request finishes: a multi-byte character split across
tokens (decodes to U+FFFD until its last byte arrives), and a tail that may
begin a stop string (cut from the reply once complete). Stop strings are looked
for only in that held tail plus the new text: an occurrence cannot start in
text already sent, since the held tail is the longest one that begins a stop
string.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

REPLACEMENT = "\ufffd"


class IncrementalText:
    def __init__(self, decode: Callable[[Sequence[int]], str], stop: tuple[str, ...] = (), keep_stop: bool = False):
        self._decode = decode
        self._stop = stop
        self._keep_stop = keep_stop
        self._surr = 0  # SGLang's surr_offset / read_offset: re-decode from surr for context
        self._read = 0
        self._held = ""  # decoded but not sent: the start of a stop string, perhaps
        self.matched: str | None = None  # the stop string that ended the reply

    def update(self, ids: Sequence[int], final: bool = False) -> str:
        """Take the token ids generated so far; return the text that may be sent after what was."""
        if self.matched is not None:
            return ""
        surr_text = self._decode(ids[self._surr : self._read])
        new = self._decode(ids[self._surr :])[len(surr_text) :]
        if new and (final or not new.endswith(REPLACEMENT)):
            self._surr, self._read = self._read, len(ids)
        elif not final:
            new = ""  # an unfinished character: wait for its last byte
        window = self._held + new
        found = min(((i, s) for s in self._stop if (i := window.find(s)) != -1), key=lambda f: f[0], default=None)
        if found is not None:
            at, self.matched = found
            self._held = ""
            return window[: at + (len(self.matched) if self._keep_stop else 0)]
        hold = 0 if final else self._partial_stop(window)
        self._held = window[len(window) - hold :] if hold else ""
        return window[: len(window) - hold]

    def _partial_stop(self, window: str) -> int:
        """Length of the longest tail of ``window`` that starts some stop string."""
        longest = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(window)), longest, -1):
                if window.endswith(s[:n]):
                    longest = n
                    break
        return longest
