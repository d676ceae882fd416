"""A short memory of cancels, so one that overtakes its request is still honoured.

chat.control and chat.inference.<pool> are different topics: a user who
presses stop right after sending can have the cancel reach the worker before
the request does. Every worker remembers every cancel for ``ttl_s``; a request
that arrives within that time completes as cancelled without touching the
engine. Pure, driven by the caller's clock; bounded by ``max_entries``.
"""

from __future__ import annotations

from collections import OrderedDict


class CancelMemory:
    def __init__(self, ttl_s: float, max_entries: int = 100_000) -> None:
        self._ttl = ttl_s
        self._max = max_entries
        self._until: OrderedDict[str, tuple[float, str]] = OrderedDict()  # request_id → (expiry, reason)

    def remember(self, request_id: str, reason: str, now: float) -> None:
        self._expire(now)
        self._until.pop(request_id, None)  # re-insert at the end: the order is by expiry
        self._until[request_id] = (now + self._ttl, reason)
        while len(self._until) > self._max:
            self._until.popitem(last=False)

    def reason(self, request_id: str, now: float) -> str | None:
        """The cancel reason if ``request_id`` was cancelled within the last ``ttl_s``."""
        self._expire(now)
        entry = self._until.get(request_id)
        return None if entry is None else entry[1]

    def __len__(self) -> int:
        return len(self._until)

    def _expire(self, now: float) -> None:
        while self._until:
            _, (expiry, _) = next(iter(self._until.items()))
            if expiry > now:
                return
            self._until.popitem(last=False)
