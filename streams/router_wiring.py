"""The router's wiring: ``chat.inference`` in, each turn routed by ``streams.router``'s core.

Beside the agent, a task reads every worker heartbeat (no group: each router
instance needs them all). On assignment and revocation of ``chat.inference``
partitions the core's memory of decisions is told, and before a turn older
than that memory is routed, the decisions are read back from the log
(``streams.route_recall``) — retried until the broker answers, since routing
it without them could send one attempt to two workers.
"""

from __future__ import annotations

import asyncio
import logging
import time

from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.catalog import inference_topic
from schemas.events import Event, InferenceRequested
from streams.fleet import HeartbeatReader
from streams.route_recall import read_decisions
from streams.router import Router, count_verdicts, policy_from
from streams.settings import RouterSettings
from streams.wiring import Agent, Wiring

log = logging.getLogger(__name__)


def wiring(kafka: KafkaSettings, settings: RouterSettings) -> Wiring:
    policy = policy_from(settings)  # fail at start-up, naming the setting, not on the first event
    router = Router(policy)

    async def heartbeats() -> None:
        # Every router instance reads every beat (no group), so this runs beside the agent, not as one.
        reader = await asyncio.to_thread(HeartbeatReader, kafka)
        try:
            while True:
                try:
                    beats = await asyncio.to_thread(reader.poll, 0.5)
                except BrokerUnavailable as exc:  # placement falls back to hashing once the beats expire
                    log.warning("reading fleet.heartbeats failed; retrying", extra={"error": str(exc)})
                    await asyncio.sleep(1.0)
                    continue
                for beat in beats:
                    router.heartbeat(beat, time.monotonic())
        finally:
            reader.close()

    async def assigned(topic: str, partitions: set[int]) -> None:
        router.memory.assigned(partitions, time.time())

    async def revoked(topic: str, partitions: set[int]) -> None:
        router.memory.revoked(partitions)

    async def recall(since: float) -> None:
        # The request may have been decided by a router before this one: route it the same way or not at all.
        while True:
            try:
                records = await asyncio.to_thread(read_decisions, kafka, policy.pools, since)
            except BrokerUnavailable as exc:
                log.warning("reading earlier routing decisions failed; retrying", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                continue
            router.recall(since, records)
            log.info("earlier routing decisions read", extra={"since": since, "records": len(records)})
            return

    async def route(event: Event) -> list[Event]:
        assert isinstance(event, InferenceRequested)  # the only type dispatched here
        since = router.memory.recall_from(event)
        if since is not None:
            await recall(since)
        outs = router.route(event, time.monotonic(), time.time())
        count_verdicts(event, outs)
        return outs

    return Wiring(
        agents=[Agent("chat.inference", {InferenceRequested: route})],
        writes=(*(inference_topic(pool) for pool in policy.pools), "chat.events", "chat.tokens"),
        tasks=[heartbeats],
        on_assigned=[assigned],
        on_revoked=[revoked],
    )
