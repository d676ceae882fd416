"""Find every occurrence of a few byte strings in a buffer or in a stream of chunks.

Streams are searched chunk by chunk, each chunk with the previous one's last
``longest - 1`` bytes in front, so a needle that straddles a chunk boundary is
found once, at its offset in the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

Hit = tuple[int, int]  # (needle index, offset)


class Needles:
    """The byte strings searched for; an empty one would match everywhere and is refused."""

    def __init__(self, needles: Sequence[bytes]) -> None:
        if not needles:
            raise ValueError("no needles to search for")
        if any(not n for n in needles):
            raise ValueError("an empty needle matches everything")
        self.needles = tuple(bytes(n) for n in needles)
        self.longest = max(len(n) for n in self.needles)

    def find(self, data: bytes) -> Iterator[Hit]:
        """Every (needle, offset) in ``data``, overlapping ones included, in needle order."""
        for index, needle in enumerate(self.needles):
            at = data.find(needle)
            while at >= 0:
                yield index, at
                at = data.find(needle, at + 1)

    def stream(self, chunks: Iterable[bytes]) -> Iterator[Hit]:
        """Every (needle, offset in the concatenated stream) across ``chunks``."""
        keep = self.longest - 1
        tail = b""
        base = 0  # stream offset of tail[0]
        for chunk in chunks:
            if not chunk:
                continue
            buf = tail + chunk
            for index, at in self.find(buf):
                if at + len(self.needles[index]) > len(tail):  # not wholly inside the tail: not seen before
                    yield index, base + at
            tail = buf[-keep:] if keep else b""
            base += len(buf) - len(tail)
