"""`make bench`: every benchmark, each printing its figure next to a baseline measured in the same run.

codec and router_sim are in-process; engine starts the CPU engine with its default model (no
Kafka); pipeline, router_stack, load, gateways and fanout start isolated stacks (fanout: the gateway
alone) on the running Kafka and Cassandra (a few minutes in all).
"""

import sys

from bench import codec, engine, fanout, gateways, load, pipeline, replay, retrieval, router_sim, router_stack

for name, module in (
    ("codec", codec), ("router_sim", router_sim), ("engine", engine), ("pipeline", pipeline),
    ("router_stack", router_stack), ("replay", replay), ("load", load), ("gateways", gateways),
    ("fanout", fanout), ("retrieval", retrieval),
):
    print(f"\n== bench.{name}", flush=True)
    sys.argv = [f"bench.{name}"]
    module.main()
