"""Cache-aware placement: sticky homes, explicit hot thresholds, remembered moves."""

from __future__ import annotations

from streams.placement import Placement, PlacementConfig, Replica


def fleet(*loads: float) -> list[Replica]:
    return [Replica(f"w{i}", (2 * i, 2 * i + 1), load) for i, load in enumerate(loads)]


def test_a_new_conversation_goes_to_the_least_loaded_worker_and_stays() -> None:
    p = Placement()
    first = p.place("c1", fleet(5, 1, 3))
    assert first.replica == "w1" and first.reason == "new"
    for _ in range(3):  # its own placements raise w1's estimate, but not past the thresholds
        again = p.place("c1", fleet(5, 1, 3))
        assert again.partition == first.partition and again.reason == "sticky"


def test_a_hot_home_moves_the_conversation_and_the_move_is_remembered() -> None:
    p = Placement(PlacementConfig(balance_abs=4, balance_rel=1.5))
    home = p.place("c1", fleet(0, 0))
    loads = [0.0, 0.0]
    loads[int(home.replica[1])] = 10
    p.heartbeat("w0"), p.heartbeat("w1")
    moved = p.place("c1", fleet(*loads))
    assert moved.reason == "moved_hot" and moved.replica != home.replica
    p.heartbeat("w0"), p.heartbeat("w1")
    assert p.place("c1", fleet(*loads)).partition == moved.partition  # its new home


def test_both_thresholds_must_be_crossed() -> None:
    p = Placement(PlacementConfig(balance_abs=4, balance_rel=1.5))
    home = p.place("c1", [Replica("a", (0,), 0), Replica("b", (1,), 1)]).replica
    assert home == "a"
    other = "b"

    def loads(h: float, o: float) -> list[Replica]:
        return [Replica(home, (0,), h), Replica(other, (1,), o)]

    p.heartbeat(home), p.heartbeat(other)
    assert p.place("c1", loads(14, 10)).reason == "sticky"  # 4 more is not more than 4
    p.heartbeat(home), p.heartbeat(other)
    assert p.place("c1", loads(20, 15)).reason == "sticky"  # 5 more, but only 1.33x
    p.heartbeat(home), p.heartbeat(other)
    assert p.place("c1", loads(20, 10)).reason == "moved_hot"


def test_a_home_whose_partition_has_no_owner_moves() -> None:
    p = Placement()
    home = p.place("c1", fleet(0, 0, 0))
    survivors = [r for r in fleet(0, 0, 0) if home.partition not in r.partitions]
    moved = p.place("c1", survivors)
    assert moved.reason == "moved_gone" and moved.replica != home.replica


def test_no_workers_no_decision() -> None:
    assert Placement().place("c1", []) is None
    assert Placement().place("c1", [Replica("w0", (), 0)]) is None


def test_equal_loads_spread_conversations_over_workers() -> None:
    p = Placement()
    chosen = set()
    for i in range(50):
        for r in ("w0", "w1", "w2"):
            p.heartbeat(r)
        chosen.add(p.place(f"c{i}", fleet(0, 0, 0)).replica)
    assert chosen == {"w0", "w1", "w2"}
