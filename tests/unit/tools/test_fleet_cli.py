"""`parley fleet plan`: the example's commands, then its manifests, as one YAML stream."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tools.fleet_cli import app

runner = CliRunner()


def test_commands_only_prints_every_launch_of_the_example():
    result = runner.invoke(app, ["plan", "--commands-only"])
    assert result.exit_code == 0, result.output
    headers = [line for line in result.output.splitlines() if line.startswith("# pool ")]
    assert [h.split(" · ")[:2] for h in headers] == [
        ["# pool small", "engine"], ["# pool medium", "engine"], ["# pool frontier", "prefill"],
        ["# pool frontier", "decode"], ["# pool frontier", "router"],
    ]
    assert result.output.count("python3 -m sglang.launch_server \\") == 4
    assert "python3 -m sglang_router.launch_router \\" in result.output
    assert "  --speculative-algorithm EAGLE3 \\" in result.output


def test_one_pool_is_a_shell_script_of_one_command():
    result = runner.invoke(app, ["plan", "--commands-only", "--pool", "small"])
    assert result.exit_code == 0, result.output
    script = [line for line in result.output.splitlines() if line and not line.startswith("#")]
    assert script[0] == "python3 -m sglang.launch_server \\" and not script[-1].endswith("\\")
    assert all(line.endswith(" \\") for line in script[:-1])
    assert "--model-path meta-llama/Llama-3.1-8B-Instruct" in result.output and "frontier" not in result.output


def test_an_unknown_pool_is_refused():
    result = runner.invoke(app, ["plan", "--commands-only", "--pool", "huge"])
    assert result.exit_code == 1 and "no pool 'huge'" in result.output


def test_a_bad_spec_fails_naming_the_field(tmp_path: Path):
    spec = tmp_path / "fleet.yaml"
    spec.write_text("name: x\nnamespace: x\nimages: {parley: a, sglang: b}\nsglang_release: '1'\npools: [{name: huge}]\n")
    result = runner.invoke(app, ["plan", "--spec", str(spec), "--commands-only"])
    assert result.exit_code == 1
    assert "pools[0].model: missing" in result.output


def test_plan_prints_the_commands_as_comments_then_the_manifests():
    pytest.importorskip("tools.fleet.kubernetes", reason="the manifests are the k8s branch's (tools/fleet/kubernetes.py)")
    result = runner.invoke(app, ["plan"])
    assert result.exit_code == 0, result.output
    head, _, manifests = result.output.partition("\n---\n")
    assert all(line.startswith("#") for line in head.splitlines()), "commands must stay YAML comments"
    docs = [d for d in yaml.safe_load_all(manifests) if d]
    assert docs and all("kind" in d and "apiVersion" in d for d in docs)


def test_plan_out_writes_the_kustomize_directory(tmp_path: Path):
    pytest.importorskip("tools.fleet.kubernetes", reason="the manifests are the k8s branch's (tools/fleet/kubernetes.py)")
    result = runner.invoke(app, ["plan", "--out", str(tmp_path / "k")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "k" / "kustomization.yaml").exists()
