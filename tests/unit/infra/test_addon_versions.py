"""The cluster add-ons Terraform installs are the releases whose CRDs kubeconform validates the manifests against:
a ScaledObject field of KEDA 2.21 (``fallback.behavior``) is refused by an older KEDA's CRD at apply time."""

from __future__ import annotations

import re
from pathlib import Path

import hcl2

from tools.fleet.k8s_schemas import CRD_SOURCES

ADDONS = Path(__file__).resolve().parents[3] / "infra" / "terraform" / "modules" / "cluster-addons" / "main.tf"


def chart_versions() -> dict[str, str]:
    (expression,) = [block["chart_version"] for block in hcl2.loads(ADDONS.read_text())["locals"] if "chart_version" in block]
    return dict(re.findall(r'(\w+) = "([^"]+)"', expression))  # the literal map inside merge(…, var.chart_versions)


def test_keda_and_leaderworkerset_charts_match_the_validated_crds() -> None:
    validated = {s.module: s.version.removeprefix("v") for s in CRD_SOURCES}
    charts = chart_versions()
    assert charts["keda"] == validated["github.com/kedacore/keda/v2"]
    assert charts["leader_worker_set"] == validated["sigs.k8s.io/lws"]
