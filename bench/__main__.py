"""`make bench`: every benchmark, each printing its figure next to a baseline measured in the same run.

codec, router_sim and moderation are in-process; markdown times the page's reply renderer in Chromium; engine
starts the CPU engine with its default model (no Kafka); token_path times the engine API's stream forms (in process,
then through synthetic engines); pipeline, router_stack, load, guidellm (GuideLLM, from .venv-bench, against the
OpenAI endpoint), turn_cost, gateways, fanout, ingest, moderation_stack and experiment start isolated stacks (fanout: the gateway
alone) on the running Kafka and Cassandra; retrieval writes its labelled set into Cassandra, search one user's
1,000 conversations; processors starts one processor process at a time on an isolated namespace; storage rebuilds
into scratch keyspaces and flushes them with nodetool (a few minutes in all). fanout, processors, replay and storage
also rewrite their figures in bench/results/,
which `parley capacity` reads.
"""

import sys

from bench import (
    codec, engine, experiment, fanout, gateways, guidellm, ingest, load, markdown, moderation, moderation_stack, pipeline, processors, replay,
    retrieval, router_sim, router_stack, search, storage, token_path, turn_cost,
)

for name, module in (
    ("codec", codec), ("markdown", markdown), ("router_sim", router_sim), ("engine", engine), ("token_path", token_path),
    ("pipeline", pipeline),
    ("router_stack", router_stack), ("replay", replay), ("processors", processors), ("storage", storage),
    ("load", load), ("guidellm", guidellm), ("turn_cost", turn_cost), ("gateways", gateways),
    ("fanout", fanout), ("retrieval", retrieval), ("search", search), ("ingest", ingest), ("moderation", moderation),
    ("moderation_stack", moderation_stack), ("experiment", experiment),
):
    print(f"\n== bench.{name}", flush=True)
    sys.argv = [f"bench.{name}"]
    module.main()
