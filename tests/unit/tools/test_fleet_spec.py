"""The fleet spec loader: the shipped example reads, and each impossible spec is refused by its field's path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.errors import ConfigError
from schemas.catalog import POOLS
from tools.fleet.spec import EXAMPLE, Range, load, parse


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def pool(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in data["pools"] if p["name"] == name)


def test_the_example_is_the_default_and_has_every_pool():
    spec = load()
    assert spec == load(EXAMPLE)
    assert tuple(p.name for p in spec.pools) == POOLS


def test_each_example_pool_names_its_models_chat_template():
    """/generate takes text: a pool rendered in another model's template gets malformed prompts."""
    assert {p.model: p.template for p in load().pools} == {
        "meta-llama/Llama-3.1-8B-Instruct": "llama3",
        "Qwen/Qwen3-30B-A3B": "chatml",
        "deepseek-ai/DeepSeek-V3-0324": "deepseek",
    }


def test_a_side_inherits_what_it_does_not_set():
    frontier = load().pool("frontier")
    prefill, decode = frontier.engines
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert (prefill.tp, prefill.dp, prefill.ep) == (frontier.tp, frontier.dp, frontier.ep) == (16, 16, 16)
    assert (decode.tp, decode.nodes_per_replica, decode.mem_fraction_static) == (32, 4, 0.83)
    assert decode.chunked_prefill_size == frontier.chunked_prefill_size
    assert prefill.extra_args == (("moe-a2a-backend", "deepep"), ("deepep-mode", "normal"))
    assert prefill.replicas == Range(1, 4) and decode.gpus_per_replica(frontier.gpu) == 32


def test_a_plain_pool_is_one_kind_of_engine():
    (engine,) = load().pool("small").engines
    assert engine.role == "engine" and engine.replicas == Range(2, 6) and engine.tp == 1


def _set(path: str, value: Any):
    """A change to the example: ``pools.medium.gpu.per_node`` → that key set (None deletes it)."""

    def change(data: dict[str, Any]) -> None:
        keys = path.split(".")
        node: Any = data
        if keys[0] == "pools" and len(keys) > 2:
            node, keys = pool(data, keys[1]), keys[2:]
        for key in keys[:-1]:
            node = node[key]
        if value is None:
            node.pop(keys[-1])
        else:
            node[keys[-1]] = value

    return change


REFUSED = [
    # (change, the field the error must name, a word of the reason)
    (_set("colour", "blue"), "colour: unknown field", "known"),
    (_set("pools.small.gpus", 1), "pools[0].gpus: unknown field", "known"),
    (_set("pools.frontier.disaggregation.decode.speed", 1), "pools[2].disaggregation.decode.speed: unknown", "field"),
    (_set("pools.frontier.disaggregation.decode.role", "prefill"), "pools[2].disaggregation.decode.role", "unknown"),
    (_set("pools.small.tp", "1"), "pools[0].tp: expected int", "str"),
    (_set("pools.small.priority_scheduling", "yes"), "pools[0].priority_scheduling: expected bool", "str"),
    (_set("pools.small.max_running_requests", True), "pools[0].max_running_requests: expected int", "bool"),
    (_set("pools.small.model", None), "pools[0].model: missing", "missing"),
    (_set("pools.small.replicas", {"min": 3, "max": 2}), "pools[0].replicas", "min <= max"),
    (_set("pools.small.name", "tiny"), "pools[0].name", "not a pool"),
    (_set("pools.medium.name", "small"), "pools[1].name", "twice"),
    (_set("namespace", "Parley_Prod"), "namespace", "DNS"),
    (_set("pools.medium.tp", 4), "pools[1].tp: tp × dp = 4 × 1", "2 GPUs"),
    (_set("pools.medium.ep", 3), "pools[1].ep: ep=3 must divide tp=2", "divide"),
    (_set("pools.medium.moe", False), "pools[1].ep: expert parallelism on a dense model", "moe: false"),
    (_set("pools.frontier.disaggregation.decode.tp", 16), "pools[2].disaggregation.decode.tp", "32 GPUs"),
    (_set("pools.frontier.disaggregation.prefill.dp", 3), "pools[2].disaggregation.prefill.dp", "dividing tp=16"),
    (_set("pools.frontier.disaggregation.transfer_backend", None), "pools[2].disaggregation.transfer_backend", "missing"),
    (_set("pools.frontier.disaggregation.transfer_backend", "tcp"), "pools[2].disaggregation.transfer_backend", "one of"),
    (_set("pools.frontier.disaggregation.bootstrap_port", 30000), "pools[2].disaggregation.bootstrap_port", "HTTP port"),
    (_set("pools.frontier.disaggregation.router", {"replicas": 7}), "pools[2].disaggregation.router.replicas", "partitions"),
    (_set("pools.frontier.disaggregation.router", {"policy": "sticky"}), "pools[2].disaggregation.router.policy", "one of"),
    (_set("pools.medium.speculative.draft_model", None), "pools[1].speculative.draft_model", "EAGLE3 needs"),
    (_set("pools.medium.speculative.algorithm", "MEDUSA"), "pools[1].speculative.algorithm", "one of"),
    (_set("pools.medium.speculative.num_draft_tokens", 8), "pools[1].speculative.num_draft_tokens", "num_steps + 1"),
    (_set("pools.small.template", "mistral"), "pools[0].template", "one of"),
    (_set("pools.small.template", None), "pools[0].template", "missing"),
    (_set("pools.small.schedule_policy", "lpm"), "pools[0].priority_scheduling", "fcfs"),
    (_set("pools.small.schedule_policy", "random"), "pools[0].schedule_policy", "one of"),
    (_set("pools.small.weights_gib", 70), "pools[0].mem_fraction_static", "no KV cache"),
    (_set("pools.small.mem_fraction_static", 1.2), "pools[0].mem_fraction_static", "between 0 and 1"),
    (_set("pools.small.replicas", 8), "pools[0].replicas.max: 8 engines", "partitions of chat.inference.small"),
    (_set("pools.small.engines_per_worker", 0), "pools[0].engines_per_worker", "at least 1"),
    (_set("pools.small.gpu", {"type": "H100", "per_node": 0, "memory_gib": 80}), "pools[0].gpu.per_node", "at least 1"),
    (_set("pools.small.port", 70000), "pools[0].port", "not a TCP port"),
    (_set("pools.small.extra_args", {"--page-size": 16}), "pools[0].extra_args", "without its dashes"),
    (_set("pools.small.extra_args", {"enable-torch-compile": False}), "pools[0].extra_args.enable-torch-compile", "true"),
    (_set("pools", []), "pools", "at least one"),
]


@pytest.mark.parametrize(("change", "field", "reason"), REFUSED, ids=[r[1] for r in REFUSED])
def test_an_impossible_spec_is_refused_by_field(change, field, reason):
    data = copy.deepcopy(example())
    change(data)
    with pytest.raises(ConfigError) as caught:
        parse(data, source="spec")
    message = str(caught.value)
    assert message.startswith(f"spec: {field}"), message
    assert reason in message, message


def test_every_refusal_above_starts_from_a_spec_that_loads():
    parse(copy.deepcopy(example()))  # so each refusal is its change's


def test_an_unreadable_spec_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("pools: [unclosed")
    with pytest.raises(ConfigError, match="not YAML"):
        load(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping at the top"):
        load(tmp_path / "list.yaml")
