"""Router: place each InferenceRequested on a pool and a partition of its topic.

The policy (``route``) is pure. For now there is one rule: the default pool,
and a partition sticky per conversation — ``partition_for(conversation_id)``,
Kafka's own murmur2 — so every turn of a conversation lands on the same
worker and finds its prefix in that engine's KV cache. The shell (``build_app``)
consumes ``chat.inference`` and produces InferenceRouted to
``chat.inference.<pool>`` at exactly that partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import faust

from parley.partitioning import partition_for
from parley.settings import KafkaSettings
from schemas.catalog import TOPICS, inference_topic
from schemas.events import InferenceRequested, InferenceRouted
from streams.app import decoded, raw_topic
from streams.settings import RouterSettings, StreamsSettings
from streams.shell import dead_letter_current, processor_app, send_event


@dataclass(frozen=True)
class Policy:
    models: dict[str, str]  # pool → model name it serves
    default_pool: str
    partitions: dict[str, int]  # pool → partitions of chat.inference.<pool>


def policy_from(settings: RouterSettings) -> Policy:
    models = settings.pool_models()
    partitions = {pool: TOPICS[inference_topic(pool)].partitions for pool in models}
    return Policy(models=models, default_pool=settings.default_pool, partitions=partitions)


def route(request: InferenceRequested, policy: Policy) -> InferenceRouted:
    pool = policy.default_pool
    return InferenceRouted(
        conversation_id=request.conversation_id,
        user_id=request.user_id,
        trace_id=request.trace_id,
        request=request,
        pool=pool,
        model=policy.models[pool],
        partition=partition_for(request.conversation_id, policy.partitions[pool]),
        route_reason="sticky",
    )


def build_app(streams: StreamsSettings, kafka: KafkaSettings, settings: RouterSettings) -> faust.App:
    policy = policy_from(settings)  # fail at start-up, naming the setting, not on the first event
    app, group = processor_app(streams, kafka, "router")
    source = raw_topic(app, kafka, "chat.inference")
    sinks = {pool: raw_topic(app, kafka, inference_topic(pool)) for pool in policy.models}

    @app.agent(source, name="router")
    async def router(stream: faust.StreamT) -> None:
        async for event in decoded(app, stream, consumer=group):
            if not isinstance(event, InferenceRequested):
                await dead_letter_current(app, stream, group, TypeError(f"unexpected {type(event).__name__}"))
                continue
            routed = route(event, policy)
            await send_event(sinks[routed.pool], routed, partition=routed.partition)

    return app
