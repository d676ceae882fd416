"""bench.chaos's fault rotation: every fault once per round, every node of the infra a target of its own."""

from __future__ import annotations

from types import SimpleNamespace

from bench.chaos import Chaos, Component, Fault


def _chaos(nodes: int, can_slow: bool) -> Chaos:
    infra = SimpleNamespace(nodes={"kafka": nodes, "cassandra": nodes}, can_slow=can_slow)
    components = [Component(name, None, None) for name in ("w1", "w2", "router", "gateway-1")]  # type: ignore[arg-type]
    return Chaos(None, infra, components)  # type: ignore[arg-type]


def test_one_node_of_each_is_killed_paused_and_slowed() -> None:
    faults = _chaos(1, can_slow=True).rotation()
    assert Fault("kill", "kafka") in faults and Fault("slow", "kafka") in faults
    assert Fault("kill", "cassandra") in faults and Fault("pause", "cassandra") in faults
    assert {f.target for f in faults} >= {"w1", "w2", "router", "gateway-1"}
    assert len(faults) == len(set(faults)) == 8
    assert Fault("kill", "cassandra").label == "kill cassandra"


def test_replicas_are_each_a_target_and_brokers_are_paused_without_a_proxy() -> None:
    faults = _chaos(3, can_slow=False).rotation()
    for node in range(3):
        assert {Fault("kill", "kafka", node), Fault("pause", "kafka", node)} <= set(faults)
        assert {Fault("kill", "cassandra", node), Fault("pause", "cassandra", node)} <= set(faults)
    assert not [f for f in faults if f.action == "slow"]
    assert len(faults) == len(set(faults)) == 4 + 12
    assert Fault("pause", "cassandra", 0).label == "pause cassandra 0"
    assert Fault("kill", "w2").label == "kill worker"
