"""bench.chaos's fault rotation: every fault once per round, every node of the infra a target of its own."""

from __future__ import annotations

from types import SimpleNamespace

from bench.chaos import Chaos, Component, Fault


def _chaos(kafka: int, cassandra: int) -> Chaos:
    infra = SimpleNamespace(nodes={"kafka": kafka, "cassandra": cassandra})
    components = [Component(name, None, None) for name in ("w1", "w2", "router", "gateway-1")]  # type: ignore[arg-type]
    return Chaos(None, infra, components)  # type: ignore[arg-type]


def test_one_node_each_today() -> None:
    faults = _chaos(1, 1).rotation()
    assert Fault("kill", "kafka") in faults and Fault("slow", "kafka") in faults
    assert Fault("kill", "cassandra") in faults and Fault("pause", "cassandra") in faults
    assert {f.target for f in faults} >= {"w1", "w2", "router", "gateway-1"}
    assert len(faults) == len(set(faults)) == 8


def test_replicas_are_each_a_target() -> None:
    faults = _chaos(3, 3).rotation()
    for node in range(3):
        assert {Fault("kill", "kafka", node), Fault("slow", "kafka", node)} <= set(faults)
        assert {Fault("kill", "cassandra", node), Fault("pause", "cassandra", node)} <= set(faults)
    assert Fault("pause", "cassandra", 2).label == "pause cassandra 2"
    assert Fault("kill", "w2").label == "kill worker"

