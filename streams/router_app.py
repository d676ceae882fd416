"""The router as a faust agent: ``chat.inference`` in, each turn routed by ``streams.router``'s core.

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

import faust

from parley.errors import BrokerUnavailable
from parley.settings import KafkaSettings
from schemas.catalog import inference_topic, topic_name_for
from schemas.events import InferenceRequested, InferenceRouted
from streams.app import decoded, raw_topic
from streams.fleet import HeartbeatReader
from streams.route_recall import read_decisions
from streams.router import Router, count_verdicts, policy_from
from streams.settings import RouterSettings, StreamsSettings
from streams.shell import dead_letter_current, processor_app, send_event

log = logging.getLogger(__name__)


def build_app(streams: StreamsSettings, kafka: KafkaSettings, settings: RouterSettings) -> faust.App:
    policy = policy_from(settings)  # fail at start-up, naming the setting, not on the first event
    app, group = processor_app(streams, kafka, "router")
    source = raw_topic(app, kafka, "chat.inference")
    names = [inference_topic(pool) for pool in policy.pools] + ["chat.events", "chat.tokens"]
    sinks = {name: raw_topic(app, kafka, name) for name in names}
    router = Router(policy)

    @app.task
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

    source_name = kafka.topic("chat.inference")

    async def assigned(_: object, assigned: set[faust.types.TP], **__: object) -> None:
        router.memory.assigned((tp.partition for tp in assigned if tp.topic == source_name), time.time())

    async def revoked(_: object, revoked: set[faust.types.TP], **__: object) -> None:
        router.memory.revoked(tp.partition for tp in revoked if tp.topic == source_name)

    app.on_partitions_assigned.connect(assigned)
    app.on_partitions_revoked.connect(revoked)

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

    @app.agent(source, name="router")
    async def route(stream: faust.StreamT) -> None:
        async for event in decoded(app, stream, consumer=group):
            if not isinstance(event, InferenceRequested):
                await dead_letter_current(app, stream, group, TypeError(f"unexpected {type(event).__name__}"))
                continue
            since = router.memory.recall_from(event)
            if since is not None:
                await recall(since)
            outs = router.route(event, time.monotonic(), time.time())
            count_verdicts(event, outs)
            for out in outs:
                partition = out.partition if isinstance(out, InferenceRouted) else None
                await send_event(sinks[topic_name_for(out)], out, partition=partition)

    return app
