"""A bounded map that forgets the least recently used entry: the processors'
per-conversation state, which Cassandra can always give back."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Store ``value``; returns the entries forgotten to make room (oldest first)."""
        self._items[key] = value
        self._items.move_to_end(key)
        forgotten = []
        while len(self._items) > self.capacity:
            forgotten.append(self._items.popitem(last=False))
        return forgotten

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

    def items(self) -> list[tuple[K, V]]:
        """A snapshot, least recently used first (the map may change while the caller goes through it)."""
        return list(self._items.items())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items
