"""A fleet spec as Kubernetes manifests: ``render`` (pure) and ``write`` (a kustomize directory).

One spec drives both the SGLang commands (tools/fleet/sglang.py) and these
manifests, so the renderer is Python rather than a Helm chart, whose templates
would have to repeat the spec's derivations (GPUs per pod, partition caps, the
worker's engine URLs). The output is a plain kustomize base: operators overlay
it (``kubectl apply -k``, Argo CD, Flux) the way Strimzi and Confluent users
already manage their Kafka resources. docs/kubernetes.md says what is rendered
and why; tests/integration/test_k8s_manifests.py validates it with kubeconform.

What infra/terraform makes is referenced, never rendered (two owners of one
object would undo each other): the namespace, ``parley-infra`` and the Secrets
(docs/kubernetes.md, "What Terraform provides").

    render(spec) ── parley-config, KEDA's Kafka credentials, the service accounts
                 ├─ k8s_parley: the gateway; each consumer group of tools/topology.py
                 ├─ k8s_engines: each pool's engines, router and workers
                 └─ the Grafana dashboard (infra/grafana/parley.json) for the Grafana sidecar
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tools.fleet import k8s_engines as engines
from tools.fleet import k8s_objects as k
from tools.fleet import k8s_parley as parley
from tools.fleet.k8s_objects import Doc
from tools.fleet.spec import FleetSpec

DASHBOARD = Path(__file__).resolve().parents[2] / "infra" / "grafana" / "parley.json"


def render(spec: FleetSpec) -> list[Doc]:
    """Every manifest of the fleet, in apply order (configuration and service accounts first)."""
    ns = spec.namespace
    urls = {pool.name: engines.engine_url(spec, pool) for pool in spec.pools}
    docs: list[Doc] = [
        parley.config_map(spec, urls),
        parley.kafka_trigger_auth(ns),
        *parley.service_accounts(ns),
        *parley.gateway(spec),
    ]
    for service in parley.group_services():
        docs += parley.consumer(spec, service)
    for i, pool in enumerate(spec.pools):
        docs += engines.pool_docs(spec, pool, f"pools[{i}]")
    docs.append(dashboard(ns))
    return json.loads(json.dumps(docs))  # plain trees: no object shared between two places (YAML would alias it)


def dashboard(namespace: str) -> Doc:
    """infra/grafana/parley.json as a ConfigMap the Grafana sidecar loads (label ``grafana_dashboard``)."""
    label = {**k.labels("dashboard", "dashboard"), "grafana_dashboard": "1"}
    meta = k.meta("parley-dashboard", namespace, label)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"parley.json": DASHBOARD.read_text()}}


def file_name(doc: Doc) -> str:
    """The file a manifest goes in: its component's (gateway.yaml, worker-small.yaml, …)."""
    return f"{doc['metadata']['labels'][k.COMPONENT]}.yaml"


def write(docs: list[Doc], out: Path) -> list[Path]:
    """One file per component plus ``kustomization.yaml`` listing them, in render order; the paths written.

    Files of components no longer rendered are left alone: ``out`` is the operator's directory.
    """
    out.mkdir(parents=True, exist_ok=True)
    by_file: dict[str, list[Doc]] = {}
    for doc in docs:
        by_file.setdefault(file_name(doc), []).append(doc)
    paths = []
    for name, group in by_file.items():
        path = out / name
        path.write_text(yaml.safe_dump_all(group, sort_keys=False))
        paths.append(path)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": list(by_file)}
    path = out / "kustomization.yaml"
    path.write_text("# Rendered by `parley fleet plan --out`: overlay it, do not edit it.\n" + yaml.safe_dump(kustomization, sort_keys=False))
    return [*paths, path]
