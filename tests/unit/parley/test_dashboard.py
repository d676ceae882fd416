"""The Grafana dashboard queries only series Parley exports, so it cannot silently go blank."""

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import parley.metrics  # noqa: F401  (registers every series)

DASHBOARD = Path(__file__).resolve().parents[3] / "infra" / "grafana" / "parley.json"


def exported() -> set[str]:
    names = {"parley_consumer_lag"}  # collected at scrape time (LagCollector)
    for family in REGISTRY.collect():
        for sample in family.samples:
            names.add(sample.name)
        names.add(family.name)
        if family.type == "counter":  # labelled counters have no samples until first used
            names.add(family.name + "_total")
    return names


def test_every_series_the_dashboard_queries_is_exported():
    dash = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dash["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(parley_[a-z_]+)", target["expr"])
    }
    assert queried, "the dashboard queries nothing"
    histograms = {n.removesuffix("_bucket") for n in queried if n.endswith("_bucket")}
    missing = {n for n in queried if n not in exported() and n.removesuffix("_bucket") not in histograms | exported()}
    assert not missing, f"the dashboard queries series nobody exports: {sorted(missing)}"
