"""Every rendered manifest validates with kubeconform against the API's schemas, strictly and offline.

tools/fleet/install_kubeconform.sh builds kubeconform from the Go module proxy and prepares the schemas
(core kinds from kubernetes-validate, the CRDs of KEDA, the Prometheus operator and LeaderWorkerSet from
their Go modules); it is idempotent, so this test runs it rather than assume it ran. A kind without a
schema is a failure, not a skip: every kind rendered must be one the cluster's operators define.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.tools.test_k8s_render import SPECS
from tools.fleet.k8s_schemas import SCHEMA_LOCATIONS
from tools.fleet.kubernetes import render, write

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"


@pytest.fixture(scope="module")
def kubeconform() -> list[str]:
    subprocess.run(
        ["bash", str(ROOT / "tools" / "fleet" / "install_kubeconform.sh")],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    locations = [arg for loc in SCHEMA_LOCATIONS for arg in ("-schema-location", str(TOOLS / "k8s-schemas" / loc))]
    return [str(TOOLS / "bin" / "kubeconform"), "-strict", "-summary", "-verbose", "-output", "json", *locations]


def validate(kubeconform: list[str], paths: list[Path]) -> dict:
    result = subprocess.run([*kubeconform, *map(str, paths)], capture_output=True, text=True, timeout=120)
    report = json.loads(result.stdout)
    report["rc"] = result.returncode
    return report


def failures(report: dict) -> list[str]:
    return [f"{r['filename']}: {r['kind']} {r['name']}: {r.get('msg', '')}" for r in report["resources"] if r["status"] != "statusValid"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_rendered_manifest_is_valid_and_none_is_skipped(kubeconform, tmp_path: Path, name: str) -> None:
    docs = render(SPECS[name])
    paths = [p for p in write(docs, tmp_path) if p.name != "kustomization.yaml"]  # kustomize's, not the API's
    report = validate(kubeconform, paths)
    assert failures(report) == []
    summary = report["summary"]
    assert summary["valid"] == len(docs), summary
    assert summary["invalid"] == summary["errors"] == summary["skipped"] == 0, summary
    assert report["rc"] == 0
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ScaledObject", "ServiceMonitor", "PodDisruptionBudget"} <= kinds
    assert ("LeaderWorkerSet" in kinds) == any(p.disaggregation or p.nodes_per_replica > 1 for p in SPECS[name].pools)


def test_kubeconform_catches_bad_manifests(kubeconform, tmp_path: Path) -> None:
    """Strict: an unknown field in a core kind and in a custom resource, a wrong type, a kind nobody defines."""
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render(SPECS["example"])}
    deployment = copy.deepcopy(docs["Deployment", "gateway"])
    deployment["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    scaled = copy.deepcopy(docs["ScaledObject", "worker-small"])
    scaled["spec"]["maxReplicas"] = 3  # KEDA's field is maxReplicaCount
    lws = copy.deepcopy(docs["LeaderWorkerSet", "frontier-decode"])
    lws["spec"]["leaderWorkerTemplate"]["size"] = "four"
    unknown = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([deployment, scaled, lws, unknown]))
    report = validate(kubeconform, [bad])
    by_name = {(r["kind"], r["name"]): r for r in report["resources"]}
    assert by_name["Deployment", "gateway"]["status"] == "statusInvalid"
    assert "resourcez" in by_name["Deployment", "gateway"]["msg"]
    assert by_name["ScaledObject", "worker-small"]["status"] == "statusInvalid"
    assert by_name["LeaderWorkerSet", "frontier-decode"]["status"] == "statusInvalid"
    assert by_name["Gadget", "g"]["status"] == "statusError"  # no schema: an error, never a skip
    assert report["summary"]["valid"] == 0 and report["summary"]["skipped"] == 0
    assert report["rc"] != 0
