"""`make bench`: every benchmark, each printing its figure next to a baseline measured in the same run.

codec, router_sim and moderation are in-process; engine starts the CPU engine with its default model (no
Kafka); pipeline, router_stack, load, gateways, fanout, ingest and moderation_stack start isolated stacks (fanout: the gateway
alone) on the running Kafka and Cassandra; retrieval writes its labelled set into Cassandra (a few minutes in all).
"""

import sys

from bench import (
    codec, engine, fanout, gateways, ingest, load, moderation, moderation_stack, pipeline, replay, retrieval, router_sim,
    router_stack,
)

for name, module in (
    ("codec", codec), ("router_sim", router_sim), ("engine", engine), ("pipeline", pipeline),
    ("router_stack", router_stack), ("replay", replay), ("load", load), ("gateways", gateways),
    ("fanout", fanout), ("retrieval", retrieval), ("ingest", ingest), ("moderation", moderation),
    ("moderation_stack", moderation_stack),
):
    print(f"\n== bench.{name}", flush=True)
    sys.argv = [f"bench.{name}"]
    module.main()
