"""The backlog of each pool: turns routed to ``chat.inference.<pool>`` that no worker has taken yet.

Heartbeats say what a worker holds (running + queued), not what waits in Kafka
for it: a worker whose slots are full pauses its partitions, and from then on
turns queue in the topic where no heartbeat counts them. So every second
(``PARLEY_ROUTER_BACKLOG_EVERY_S``) the router reads, off the event loop, the
end offset of each partition of each pool's topic and the pool group's
(``workers.<pool>``) committed offsets: a metadata, a watermark per partition and an offset fetch per pool
(``BacklogReader``, through ``parley.ops.OffsetReader``: this module is the I/O edge). ``streams.fleet.unread``
subtracts from each end where the partition's owner last said it took to (its
heartbeat's ``read_to``); for a partition no live worker reports, where the
group would resume it (its committed offset, else the log's start).

Not the committed offset everywhere: a worker commits only up to its lowest
unfinished record, so every reply it finished above a long one would count as
waiting, at any load.

A reading counts from when it began; past ``PARLEY_ROUTER_BACKLOG_STALE_S``
(broker away, reader stuck) it is not used, and admission falls back to the
heartbeats alone, as before the first reading: an unreachable broker must not
shed every turn.
"""

from __future__ import annotations

from collections.abc import Iterable

from parley.ops import OffsetReader
from parley.settings import KafkaSettings
from schemas.catalog import inference_topic
from streams.fleet import Offsets


class BacklogReader:
    """The pools' end and committed offsets through the consumer protocol (``parley.ops.OffsetReader``: the
    admin API's group requests can abort the process in a broker restart). Blocking: call ``read`` from
    one thread."""

    def __init__(self, kafka: KafkaSettings, pools: Iterable[str]) -> None:
        self._kafka = kafka
        self._ops = OffsetReader(kafka)
        self._pools = list(pools)

    def read(self) -> dict[str, Offsets]:
        """Pool → its offsets; raises ``parley.errors.BrokerUnavailable`` when the broker does not answer."""
        topics = {pool: self._kafka.topic(inference_topic(pool)) for pool in self._pools}
        partitions = self._ops.partitions_of(topics.values())
        marks = self._ops.watermarks(partitions)
        out = {}
        for pool, topic in topics.items():
            mine = [tp for tp in partitions if tp[0] == topic]
            committed = self._ops.committed(self._kafka.topic_prefix + f"workers.{pool}", mine)
            out[pool] = Offsets(
                ends={p: marks[(t, p)][1] for t, p in mine},
                # records below the log's start are gone
                starts={p: max(committed.get((t, p)) or 0, marks[(t, p)][0]) for t, p in mine},
            )
        return out
