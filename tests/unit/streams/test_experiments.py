"""Experiments: deterministic assignment by user, the arms' shares, what a declaration may say, the running
set folded from ops.experiments, and the router applying an arm's overrides. No Kafka."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from parley.errors import ConfigError
from schemas.events import ArmOverrides, Assignment, ExperimentArm, ExperimentStarted, ExperimentStopped
from streams import experiments as ex
from streams.router import Router, policy_from
from tests.unit.streams.test_router import CODE, EASY, SETTINGS, request, routed


def started(name: str = "exp", shares: tuple[float, ...] = (0.5, 0.5), tiers: tuple[str, ...] = ("free",), at: int = 1) -> ExperimentStarted:
    arms = [ExperimentArm(name=f"arm{i}", share=s) for i, s in enumerate(shares)]
    return ExperimentStarted(experiment=name, arms=arms, tiers=list(tiers), occurred_at=at)


def test_the_unit_point_is_pinned_so_assignment_survives_restarts_and_versions() -> None:
    # A change of hash would move every running experiment's users between arms mid-flight.
    assert ex.unit("exp", "user-1") == pytest.approx(0.8594070099874968, abs=1e-15)
    assert ex.unit("exp", "user-1") == ex.unit("exp", "user-1")
    assert ex.unit("exp", "user-1") != ex.unit("exp2", "user-1")


def test_the_same_user_is_always_in_the_same_arm() -> None:
    e = started()
    for user in (str(uuid.uuid4()) for _ in range(50)):
        assert len({ex.assign(e, user).name for _ in range(5)}) == 1


@pytest.mark.parametrize("shares", [(0.5, 0.5), (0.1, 0.9), (0.2, 0.3, 0.5)])
def test_arms_get_their_share_of_users(shares: tuple[float, ...]) -> None:
    e = started(shares=shares)
    n = 20_000
    counts = {a.name: 0 for a in e.arms}
    for i in range(n):
        counts[ex.assign(e, f"user-{i}").name] += 1
    for arm in e.arms:
        assert counts[arm.name] / n == pytest.approx(arm.share, abs=0.015)


def test_two_experiments_split_users_independently() -> None:
    a, b = started("a"), started("b")
    both = sum(ex.assign(a, f"u{i}").name == ex.assign(b, f"u{i}").name for i in range(10_000))
    assert both / 10_000 == pytest.approx(0.5, abs=0.03)  # not the same split twice


def test_overrides_are_refused_by_name_and_checked() -> None:
    assert ex.overrides({"pool": "medium", "medium_score": "1.5"}) == ArmOverrides(pool="medium", medium_score=1.5)
    with pytest.raises(ConfigError, match="unknown override 'temperature'.*pool, medium_score, frontier_score"):
        ex.overrides({"temperature": "0"})
    with pytest.raises(ConfigError, match="pool='huge'"):
        ex.overrides({"pool": "huge"})
    with pytest.raises(ConfigError, match="not a number"):
        ex.overrides({"frontier_score": "high"})
    with pytest.raises(ConfigError, match="finite"):
        ex.overrides({"frontier_score": "nan"})


def test_an_arm_is_parsed_from_the_command_line() -> None:
    assert ex.parse_arm("slow:0.25:pool=medium, medium_score=1") == ExperimentArm(
        name="slow", share=0.25, overrides=ArmOverrides(pool="medium", medium_score=1.0)
    )
    assert ex.parse_arm("control:0.75") == ExperimentArm(name="control", share=0.75)
    with pytest.raises(ConfigError, match="NAME:SHARE"):
        ex.parse_arm("control")
    with pytest.raises(ConfigError, match="not key=value"):
        ex.parse_arm("a:0.5:pool")


@pytest.mark.parametrize(
    "experiment, error",
    [
        (started(shares=(0.5, 0.4)), "add up to 0.9"),
        (started(shares=(1.0,)), "at least two arms"),
        (started(shares=(1.5, -0.5)), "not in"),
        (started(tiers=("gold",)), "unknown tier gold"),
        (replace(started(), experiment="bad name!"), "experiment name"),
        (replace(started(), arms=[ExperimentArm(name="a", share=0.5)] * 2), "distinct"),
        (
            replace(started(), arms=[ExperimentArm(name="a", share=0.5), ExperimentArm(
                name="b", share=0.5, overrides=ArmOverrides(medium_score=3.0, frontier_score=2.0))]),
            "above frontier_score",
        ),
    ],
)
def test_a_declaration_the_gateway_could_not_assign_fairly_is_refused(experiment: ExperimentStarted, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        ex.validate(experiment)


def test_shares_typed_as_decimals_are_accepted() -> None:
    ex.validate(started(shares=(0.1, 0.2, 0.7)))  # 0.1 + 0.2 + 0.7 is not exactly 1 in floating point


def test_the_running_set_is_a_fold_of_starts_and_stops_and_replays_to_the_same_set() -> None:
    events = [started("a", at=1), started("b", tiers=("plus",), at=2), ExperimentStopped(experiment="a"), started("c", at=3)]
    once = ex.Running().apply_all(events)
    assert sorted(once.experiments) == ["b", "c"]
    assert ex.Running().apply_all(events + events).experiments == once.experiments
    assert once.assignment("u", "enterprise") is None  # no experiment takes enterprise turns
    got = once.assignment("u", "free")
    assert isinstance(got, Assignment) and got.experiment == "c" and got.arm in {"arm0", "arm1"}


def test_a_turn_is_in_the_oldest_experiment_its_tier_takes_part_in() -> None:
    running = ex.Running().apply_all([started("late", at=5), started("early", at=2)])
    assert running.assignment("u", "free").experiment == "early"  # type: ignore[union-attr]
    assert running.overlapping(started("new", tiers=())) == ["early", "late"]  # every tier overlaps free
    assert running.overlapping(started("new", tiers=("plus",))) == []


def test_the_assignment_carries_the_arms_overrides() -> None:
    arm = ExperimentArm(name="slow", share=1.0, overrides=ArmOverrides(pool="medium"))
    e = ExperimentStarted(experiment="e", arms=[ExperimentArm(name="never", share=0.0), arm], tiers=["free"])
    got = ex.Running().apply_all([e]).assignment("anyone", "free")
    assert got == Assignment(experiment="e", arm="slow", overrides=ArmOverrides(pool="medium"))


# ------------------------------------------------------------------ the router applies the arm


def _in(arm: ArmOverrides) -> Assignment:
    return Assignment(experiment="e", arm="x", overrides=arm)


def test_an_arms_pool_serves_the_turn_and_the_route_says_experiment() -> None:
    router = Router(policy_from(SETTINGS))
    out = routed(router, replace(request(str(uuid.uuid4()), EASY), experiment=_in(ArmOverrides(pool="frontier"))))
    assert (out.pool, out.route_reason) == ("frontier", "experiment")
    assert out.request.experiment == _in(ArmOverrides(pool="frontier"))  # recorded on the routed turn too
    control = routed(router, replace(request(str(uuid.uuid4()), EASY), experiment=_in(ArmOverrides())))
    assert (control.pool, control.route_reason) == ("small", "classifier")


def test_an_arms_pool_that_cannot_hold_the_turn_leaves_the_choice_to_the_router() -> None:
    out = routed(Router(policy_from(SETTINGS)), replace(request(str(uuid.uuid4()), EASY, prompt_tokens=2000),
                                                        experiment=_in(ArmOverrides(pool="small"))))  # fmt: skip
    assert (out.pool, out.route_reason) == ("medium", "classifier")  # small holds 1000 tokens


def test_a_user_selected_model_beats_the_arm() -> None:
    out = routed(Router(policy_from(SETTINGS)), replace(request(str(uuid.uuid4()), EASY, model="m-medium"),
                                                        experiment=_in(ArmOverrides(pool="frontier"))))  # fmt: skip
    assert (out.pool, out.route_reason) == ("medium", "user_selected")


def test_an_arms_thresholds_move_the_classifiers_bar() -> None:
    router = Router(policy_from(SETTINGS))
    assert routed(router, request(str(uuid.uuid4()), CODE)).pool == "medium"
    higher = replace(request(str(uuid.uuid4()), CODE), experiment=_in(ArmOverrides(medium_score=9.0, frontier_score=9.5)))
    assert routed(router, higher).pool == "medium"  # code needs a pool trusted with it, whatever the score
    lower = replace(request(str(uuid.uuid4()), EASY), experiment=_in(ArmOverrides(medium_score=0.0, frontier_score=0.01)))
    assert routed(router, lower).pool == "frontier"
