"""`parley experiments`: what start refuses before anything is appended, and what start and stop append.
The topic is stood in for by the running set and a list of appended events (no Kafka)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from schemas.events import ArmOverrides, ExperimentArm, ExperimentStarted, ExperimentStopped
from streams.experiments import Running
from tools import experiments_cli

runner = CliRunner()


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list:
    appended: list = []
    running = Running()

    def append(kafka, event) -> None:  # type: ignore[no-untyped-def]
        appended.append(event)
        running.apply(event)

    monkeypatch.setattr(experiments_cli, "_running", lambda kafka: running)
    monkeypatch.setattr(experiments_cli, "_append", append)
    return appended


def test_start_appends_the_declaration_and_stop_its_end(log: list) -> None:
    done = runner.invoke(experiments_cli.app, ["start", "slow", "--arm", "control:0.5", "--arm", "slow:0.5:pool=medium",
                                               "--tier", "free", "--by", "ops"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "started slow: control 0.5 (control); slow 0.5 (pool=medium); tiers free" in done.output
    (started,) = log
    assert isinstance(started, ExperimentStarted) and (started.experiment, started.tiers, started.started_by) == ("slow", ["free"], "ops")
    assert started.arms == [ExperimentArm(name="control", share=0.5),
                            ExperimentArm(name="slow", share=0.5, overrides=ArmOverrides(pool="medium"))]  # fmt: skip
    listed = runner.invoke(experiments_cli.app, ["list"])
    assert "slow" in listed.output and "pool=medium" in listed.output
    stopped = runner.invoke(experiments_cli.app, ["stop", "slow", "--by", "ops"])
    assert stopped.exit_code == 0 and isinstance(log[-1], ExperimentStopped) and log[-1].experiment == "slow"
    assert "no experiment running" in runner.invoke(experiments_cli.app, ["list"]).output


@pytest.mark.parametrize(
    "args, error",
    [
        (["--arm", "a:0.5:temperature=0", "--arm", "b:0.5"], "unknown override 'temperature'"),
        (["--arm", "a:0.6", "--arm", "b:0.5"], "add up to 1.1"),
        (["--arm", "a:1"], "at least two arms"),
        (["--arm", "a:0.5:pool=gpu", "--arm", "b:0.5"], "pool='gpu'"),
    ],
)
def test_start_refuses_a_bad_declaration_and_appends_nothing(log: list, args: list[str], error: str) -> None:
    done = runner.invoke(experiments_cli.app, ["start", "x", *args])
    assert done.exit_code == 1 and error in done.output and log == []


def test_start_refuses_a_running_name_or_a_tier_already_taken_and_stop_an_unknown_name(log: list) -> None:
    assert runner.invoke(experiments_cli.app, ["start", "one", "--arm", "a:0.5", "--arm", "b:0.5", "--tier", "free"]).exit_code == 0
    again = runner.invoke(experiments_cli.app, ["start", "one", "--arm", "a:0.5", "--arm", "b:0.5", "--tier", "plus"])
    assert again.exit_code == 1 and "is running; stop it first" in again.output
    clash = runner.invoke(experiments_cli.app, ["start", "two", "--arm", "a:0.5", "--arm", "b:0.5"])  # every tier: free too
    assert clash.exit_code == 1 and "one already take turns of these tiers" in clash.output
    assert runner.invoke(experiments_cli.app, ["start", "two", "--arm", "a:0.5", "--arm", "b:0.5", "--tier", "plus"]).exit_code == 0
    unknown = runner.invoke(experiments_cli.app, ["stop", "three"])
    assert unknown.exit_code == 1 and "no experiment 'three' is running" in unknown.output
    assert len(log) == 2
