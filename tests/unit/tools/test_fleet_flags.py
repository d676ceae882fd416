"""Every SGLang flag Parley emits exists in the pinned release, takes a value iff it should, within its choices.

The fixtures are the flag sets of the released wheels' own ``add_cli_args``
(tests/fixtures/sglang/extract_server_args.py writes them); the spec names the
release it was written for.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.fixtures.sglang_flags import ROUTER, SERVER, problems
from tools.fleet import sglang
from tools.fleet.spec import EXAMPLE, parse
from tools.fleet.spec import load as load_spec

def flags_of(launch: sglang.Launch) -> dict[str, dict[str, Any]]:
    return (ROUTER if launch.role == "router" else SERVER)["flags"]


def example_data() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def variant(change) -> Any:
    data = copy.deepcopy(example_data())
    change(data)
    return parse(data)


def _pool(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in data["pools"] if p["name"] == name)


def _eagle3_small(data: dict[str, Any]) -> None:
    _pool(data, "small")["speculative"] = {
        "algorithm": "EAGLE3", "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
        "num_steps": 5, "eagle_topk": 8, "num_draft_tokens": 32,
    }


def _nixl_frontier(data: dict[str, Any]) -> None:
    _pool(data, "frontier")["disaggregation"]["transfer_backend"] = "nixl"


def _dense_medium_dp(data: dict[str, Any]) -> None:
    pool = _pool(data, "medium")
    pool.update(model="Qwen/Qwen3-32B", moe=False, weights_gib=61, ep=1, dp=2, gpu={**pool["gpu"], "per_node": 4})
    pool.pop("speculative")


def _lpm_small_with_extras(data: dict[str, Any]) -> None:
    _pool(data, "small").update(
        schedule_policy="lpm", priority_scheduling=False, extra_args={"enable-torch-compile": True, "page-size": 16}
    )


VARIANTS = {
    "example": lambda data: None,
    "eagle3 tree on the small pool": _eagle3_small,
    "nixl transfer": _nixl_frontier,
    "dense medium, dp 2 × tp 2": _dense_medium_dp,
    "lpm and extra flags on small": _lpm_small_with_extras,
}


def test_the_spec_names_the_pinned_release():
    assert SERVER["release"] == load_spec().sglang_release == "0.5.13.post1"
    assert SERVER["package"] == "sglang" and ROUTER["package"] == "sglang-router"
    assert len(SERVER["flags"]) > 300 and len(ROUTER["flags"]) > 50


@pytest.mark.parametrize("name", VARIANTS)
def test_every_flag_of_every_launch_is_in_the_release(name):
    spec = variant(VARIANTS[name])
    launches = [launch for pool in spec.pools for launch in sglang.launches(pool, namespace=spec.namespace)]
    assert {launch.role for launch in launches} == {"engine", "prefill", "decode", "router"}
    for launch in launches:
        assert problems(launch.argv, flags_of(launch)) == [], launch.argv


def test_a_static_pd_router_passes_too():
    frontier = load_spec().pool("frontier")
    launch = sglang.pd_router(frontier, ["http://p0:30000", "http://p1:30000"], ["http://d0:30000"])
    assert problems(launch.argv, ROUTER["flags"]) == []
    argv = " ".join(launch.argv)
    assert "--prefill http://p0:30000 8998 --prefill http://p1:30000 8998 --decode http://d0:30000" in argv


def test_every_engine_carries_the_flags_the_issue_asks_for():
    spec = load_spec()
    for pool in spec.pools:
        for launch in sglang.launches(pool):
            if launch.role == "router":
                continue
            argv = launch.argv
            for flag in (
                "--model-path", "--served-model-name", "--host", "--port", "--tp-size", "--chunked-prefill-size",
                "--schedule-policy", "--max-running-requests", "--mem-fraction-static", "--enable-metrics",
                "--enable-cache-report", "--incremental-streaming-output",
            ):
                assert flag in argv, (pool.name, launch.role, flag)
            assert argv[argv.index("--host") + 1] == "0.0.0.0"
    small, medium = spec.pool("small"), spec.pool("medium")
    assert _value(sglang.launches(small)[0], "--schedule-policy") == "fcfs"
    assert "--enable-priority-scheduling" in sglang.launches(small)[0].argv
    assert _value(sglang.launches(medium)[0], "--speculative-algorithm") == "EAGLE3"
    assert _value(sglang.launches(medium)[0], "--schedule-policy") == "lpm"


def test_the_frontier_pool_is_disaggregated_multi_node_with_eagle():
    prefill, decode, router = sglang.launches(load_spec().pool("frontier"), namespace="parley")
    for launch, mode in ((prefill, "prefill"), (decode, "decode")):
        assert _value(launch, "--disaggregation-mode") == mode
        assert _value(launch, "--disaggregation-transfer-backend") == "mooncake"
        assert _value(launch, "--speculative-algorithm") == "EAGLE"
        assert "--speculative-draft-model-path" not in launch.argv  # the MTP head is in the checkpoint
        assert "--enable-dp-attention" in launch.argv and launch.nodes > 1
        assert _value(launch, "--nnodes") == str(launch.nodes)
        assert _value(launch, "--node-rank") == sglang.NODE_RANK
    assert _value(prefill, "--disaggregation-bootstrap-port") == "8998"
    assert (prefill.nodes, decode.nodes, _value(decode, "--ep-size")) == (2, 4, "32")
    assert router.role == "router" and router.gpus_per_node == 0 and "--pd-disaggregation" in router.argv
    assert router.argv[:3] == sglang.ROUTER
    assert _value(router, "--service-discovery-namespace") == "parley"


def test_the_check_catches_what_the_release_would_refuse():
    flags = SERVER["flags"]
    head = sglang.SERVER
    assert problems((*head, "--no-such-flag", "1"), flags) == ["--no-such-flag: not a flag of this release"]
    assert problems((*head, "--tp", "2"), flags) == ["--tp: not a flag of this release"]  # --tp-size is
    assert problems((*head, "--enable-metrics", "true"), flags) == ["--enable-metrics: a switch, given ['true']"]
    assert problems((*head, "--tp-size"), flags) == ["--tp-size: takes 1 value(s), given []"]
    assert problems((*head, "--tp-size", "two"), flags) == ["--tp-size: 'two' is not an int"]
    assert problems((*head, "--schedule-policy", "fastest"), flags)[0].startswith("--schedule-policy: 'fastest'")
    assert problems((*head, "--port", "1", "--port", "2"), flags) == ["--port: given twice (the last one wins, silently)"]
    assert problems((*head, "--reasoning-parser", "deepseek-r1"), flags)[0].startswith("--reasoning-parser: its choices")
    deprecated = next(name for name, info in flags.items() if info["deprecated"])
    assert f"{deprecated}: deprecated in this release" in problems((*head, deprecated), flags)


def test_an_unknown_flag_in_a_spec_is_caught():
    def typo(data):
        _pool(data, "medium")["extra_args"] = {"enable-torch-compiled": True}

    (launch,) = sglang.launches(variant(typo).pool("medium"))
    assert problems(launch.argv, SERVER["flags"]) == ["--enable-torch-compiled: not a flag of this release"]


def _value(launch: sglang.Launch, flag: str) -> str:
    return launch.argv[launch.argv.index(flag) + 1]
