"""Which gateway owns which ``chat.tokens`` partitions: the rule the gateways and the edge share.

A gateway started with ``PARLEY_GATEWAY_SHARD=i/N`` owns the partitions ``p``
with ``p % N == i`` (what a Kubernetes StatefulSet ordinal gives: pod ``i`` of
``N``). The edge sends every request whose conversation it can tell to
``owner(partition_for(conversation_id, P), N)``, so each gateway reads only its
own share of the token topic: read traffic per gateway is proportional to its
own streams, not to the whole topic (docs/design.md §7, "Gateway shards").
Static on purpose: any proxy computes the owner from its configuration alone,
no membership protocol to follow, and a gateway's share never moves under its
live streams.

Pure: no I/O. ``mint_conversation_id`` takes its random source as an argument.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from parley.errors import ConfigError
from parley.partitioning import partition_for

_SHARD = re.compile(r"\s*([0-9]{1,6})\s*/\s*([0-9]{1,6})\s*")
#: Draws before minting gives up on owning the id (N draws are expected; 1,000 miss with p < 1e-4 at N = 100).
MINT_TRIES = 1000


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: owns the partitions ``p`` with ``p % count == index``."""

    index: int
    count: int

    def owns(self, partition: int) -> bool:
        return partition % self.count == self.index

    def partitions(self, total: int) -> list[int]:
        """Its partitions of a topic of ``total``."""
        return [p for p in range(total) if self.owns(p)]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(value: str, partitions: int, setting: str = "PARLEY_GATEWAY_SHARD") -> Shard | None:
    """``"i/N"`` → ``Shard(i, N)``; ``""`` → None (unsharded: owns every partition).

    ``N`` may not exceed ``partitions``: a shard ``i >= partitions`` would own nothing.
    """
    if value.strip() == "":
        return None
    found = _SHARD.fullmatch(value)
    if found is None:
        raise ConfigError(f"{setting}={value!r} is not `index/count` (e.g. 0/4), nor empty for an unsharded gateway")
    index, count = int(found[1]), int(found[2])
    if not 0 <= index < count:
        raise ConfigError(f"{setting}={value!r}: the index must be 0 … count - 1")
    if count > partitions:
        raise ConfigError(
            f"{setting}={value!r}: {count} shards of a topic of {partitions} partitions leave shards without one; "
            f"run at most {partitions} shards or give chat.tokens more partitions (docs/operations.md, 'Gateway shards')"
        )
    return Shard(index, count)


def owner(partition: int, count: int) -> int:
    """The shard of ``count`` that owns ``partition``."""
    return partition % count


def owns(shard: Shard | None, partition: int) -> bool:
    """Whether a gateway of ``shard`` owns ``partition`` (an unsharded one owns them all)."""
    return shard is None or shard.owns(partition)


def mint_conversation_id(shard: Shard | None, partitions: int, draw: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """A new conversation id whose ``chat.tokens`` partition ``shard`` owns (any id when unsharded).

    uuid4s are drawn until one lands on an owned partition: N draws expected for 1/N of the
    partitions (each draw costs a murmur2 of 36 bytes, a few µs). After MINT_TRIES misses the last
    draw is kept: an unowned id still works, its streams just go through another gateway.
    """
    cid = str(draw())
    if shard is None:
        return cid
    for _ in range(MINT_TRIES - 1):
        if shard.owns(partition_for(cid, partitions)):
            return cid
        cid = str(draw())
    return cid
