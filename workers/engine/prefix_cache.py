"""A radix-style prefix cache over token pieces, bounded by LRU: what the synthetic backend simulates.

``match`` says how many leading tokens of a prompt were seen before (SGLang's
``cached_tokens``); ``insert`` records a finished sequence. When more tokens
are held than the capacity, the least recently used leaves are evicted first,
as SGLang's RadixCache evicts unreferenced leaves.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence


class _Node:
    __slots__ = ("children", "parent", "key", "last_used")

    def __init__(self, parent: _Node | None, key: str, tick: int) -> None:
        self.children: dict[str, _Node] = {}
        self.parent = parent
        self.key = key
        self.last_used = tick


class PrefixCache:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens
        self._root = _Node(None, "", 0)
        self._clock = itertools.count(1)
        self.size = 0  # tokens held (one node per token)
        self.hit_tokens = 0
        self.lookup_tokens = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    def match(self, tokens: Sequence[str]) -> int:
        """Length of the longest cached prefix of ``tokens``; touches it (LRU) and counts the hit."""
        tick = next(self._clock)
        node, n = self._root, 0
        for t in tokens:
            child = node.children.get(t)
            if child is None:
                break
            child.last_used = tick
            node, n = child, n + 1
        self.hit_tokens += n
        self.lookup_tokens += len(tokens)
        return n

    def insert(self, tokens: Sequence[str]) -> None:
        tick = next(self._clock)
        node = self._root
        for t in tokens:
            child = node.children.get(t)
            if child is None:
                child = _Node(node, t, tick)
                node.children[t] = child
                self.size += 1
            child.last_used = tick
            node = child
        if self.size > self.capacity:
            self._evict(self.size - int(self.capacity * 0.9))

    def _evict(self, count: int) -> None:
        heap = [(n.last_used, id(n), n) for n in self._leaves()]
        heapq.heapify(heap)
        while count > 0 and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key]
            self.size -= 1
            count -= 1
            if parent is not self._root and not parent.children:
                heapq.heappush(heap, (parent.last_used, id(parent), parent))

    def _leaves(self) -> list[_Node]:
        out, stack = [], [self._root]
        while stack:
            node = stack.pop()
            if not node.children and node is not self._root:
                out.append(node)
            stack.extend(node.children.values())
        return out
