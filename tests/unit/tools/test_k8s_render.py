"""The rendered manifests, checked for what kubeconform cannot see: caps, sizes, drains, GPU placement, wiring.

tests/integration/test_k8s_manifests.py validates the same output against the API's schemas.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.errors import ConfigError
from parley.settings import describe
from schemas.catalog import TOPICS, inference_topic
from tools.fleet import k8s_parley, sglang
from tools.fleet.kubernetes import DASHBOARD, render, write
from tools.fleet.spec import EXAMPLE, FleetSpec, load, parse
from tools.topology import ENGINE, GATEWAY, SERVICES

Doc = dict[str, Any]


def _example_data() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def variant() -> FleetSpec:
    """Another shape of fleet: a namespace of its own, one engine per worker, a multi-node pool, no PD pool."""
    data = _example_data()
    data["namespace"] = "chat-prod"
    pools = {p["name"]: p for p in data["pools"]}
    pools["small"].update(engines_per_worker=1, replicas={"min": 1, "max": 4})
    pools["medium"].update(nodes_per_replica=2, tp=4, ep=2)
    data["pools"] = [pools["small"], pools["medium"]]
    return parse(data, "variant")


SPECS = {"example": load(), "variant": variant()}


@pytest.fixture(scope="module", params=sorted(SPECS))
def fleet(request) -> tuple[FleetSpec, list[Doc]]:
    spec = SPECS[request.param]
    return spec, render(spec)


def _of(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _pods(docs: list[Doc]) -> list[tuple[str, Doc]]:
    """(workload name, pod spec) of every pod template: Deployments' and both of each LeaderWorkerSet's."""
    out = []
    for d in docs:
        if d["kind"] == "Deployment":
            out.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "LeaderWorkerSet":
            t = d["spec"]["leaderWorkerTemplate"]
            out += [(d["metadata"]["name"], t["leaderTemplate"]["spec"]), (d["metadata"]["name"], t["workerTemplate"]["spec"])]
    return out


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


# ------------------------------------------------------------------ scaling


def test_keda_caps_are_the_partitions_each_group_can_use(fleet) -> None:
    spec, docs = fleet
    scaled = _of(docs, "ScaledObject")
    for service in k8s_parley.group_services():
        cap = max(TOPICS[t].partitions for t in service.consumes)
        assert scaled[service.name]["spec"]["maxReplicaCount"] == cap, service.name
    for pool in spec.pools:
        per = 1 if pool.disaggregation else pool.engines_per_worker
        partitions = TOPICS[inference_topic(pool.name)].partitions
        so = scaled[f"worker-{pool.name}"]["spec"]
        assert so["maxReplicaCount"] == min(partitions // per, max(1, pool.replicas.max // per) if not pool.disaggregation else partitions)
        assert so["maxReplicaCount"] * per <= partitions  # one member per engine, one partition per member
    for so in scaled.values():
        for trigger in so["spec"]["triggers"]:
            if trigger["type"] == "kafka":
                assert trigger["metadata"]["allowIdleConsumers"] == "false"
                assert "topic" not in trigger["metadata"]  # the group's own commits: its reads, no others
                assert int(trigger["metadata"]["lagThreshold"]) > 0


def test_the_small_pools_cap_is_its_partitions_over_engines_per_worker() -> None:
    so = _of(render(SPECS["example"]), "ScaledObject")["worker-small"]["spec"]
    assert SPECS["example"].pool("small").engines_per_worker == 2
    assert so["maxReplicaCount"] == TOPICS["chat.inference.small"].partitions // 2
    assert so["triggers"][0]["metadata"]["consumerGroup"] == "workers.small"


def test_the_cap_from_the_topology_is_the_cap_of_the_reads_the_wirings_make_in_their_groups(monkeypatch) -> None:
    """group_cap reads tools/topology.py's consumes, which adds reads outside the group; they must not raise it."""
    from streams.processors import PROCESSORS, wiring

    # The wirings only: no tokenizer or embedding model loaded for them (seconds each).
    monkeypatch.setenv("PARLEY_CONTEXT_TOKENIZER", "words")
    monkeypatch.setenv("PARLEY_DOCUMENTS_EMBEDDER_URL", "http://127.0.0.1:9")

    by_name = {s.name: s for s in SERVICES}
    for name in PROCESSORS:
        in_group = max(TOPICS[t].partitions for t in wiring(name).reads)
        assert k8s_parley.group_cap(by_name[name]) == in_group, name


def test_every_scaled_target_is_rendered_and_floors_do_not_pass_ceilings(fleet) -> None:
    _, docs = fleet
    workloads = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet")}
    for so in _of(docs, "ScaledObject").values():
        ref, s = so["spec"]["scaleTargetRef"], so["spec"]
        assert "replicas" not in workloads[ref["kind"], ref["name"]]["spec"]  # KEDA's to set: an apply must not reset it
        assert 1 <= s["minReplicaCount"] <= s["maxReplicaCount"]


# ------------------------------------------------------------------ what runs


def test_every_service_of_the_topology_is_rendered(fleet) -> None:
    spec, docs = fleet
    workloads = {**_of(docs, "Deployment"), **_of(docs, "LeaderWorkerSet")}
    pools = {p.name for p in spec.pools}
    for service in SERVICES:
        if service is ENGINE:  # the CPU engine: SGLang engines replace it, per pool
            continue
        if service.name.startswith("worker-") and service.name.removeprefix("worker-") not in pools:
            continue
        assert service.name in workloads, service.name
        pod = _pods([workloads[service.name]])[0][1]
        parley_container = pod["containers"][0]
        assert parley_container["command"] == ["python", "-m", *service.module_args], service.name
    for pool in spec.pools:
        engines = [c for _, pod in _pods(docs) for c in pod["containers"] if c["command"][:3] == list(sglang.SERVER)]
        assert any(pool.model in c["command"] for c in engines), pool.name


def test_every_container_has_requests_and_limits(fleet) -> None:
    _, docs = fleet
    for name, pod in _pods(docs):
        for c in pod["containers"]:
            for side in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][side]), (name, c["name"], side)


def test_every_container_drops_all_capabilities_and_runs_non_root_but_the_rdma_engines(fleet) -> None:
    _, docs = fleet
    for name, pod in _pods(docs):
        rdma = any("--disaggregation-mode" in c["command"] for c in pod["containers"])
        assert pod["securityContext"]["runAsNonRoot"] is not rdma, name
        assert pod["automountServiceAccountToken"] is name.endswith("-router"), name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            assert sc["capabilities"].get("add", []) == (["IPC_LOCK"] if rdma else [])
            is_engine = c["command"][:3] == list(sglang.SERVER)  # compile caches: see k8s_engines
            assert sc["readOnlyRootFilesystem"] is not is_engine, (name, c["name"])


def test_gpu_pods_select_and_tolerate_gpu_nodes_and_others_stay_off_them(fleet) -> None:
    spec, docs = fleet
    gpu_types = {p.gpu.type for p in spec.pools}
    for name, pod in _pods(docs):
        gpus = sum(c["resources"]["limits"].get("nvidia.com/gpu", 0) for c in pod["containers"])
        if gpus:
            assert pod["nodeSelector"]["parley.dev/gpu"] in gpu_types, name
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            assert any(v["name"] == "dshm" and v["emptyDir"]["medium"] == "Memory" for v in pod["volumes"])
            for c in pod["containers"]:
                r = c["resources"]
                assert r["requests"].get("nvidia.com/gpu") == r["limits"].get("nvidia.com/gpu"), (name, c["name"])
        else:
            assert "nodeSelector" not in pod and "tolerations" not in pod, name


def test_the_gateway_drains_within_its_grace_period() -> None:
    docs = render(SPECS["example"])
    pod = _of(docs, "Deployment")["gateway"]["spec"]["template"]["spec"]
    (gateway,) = pod["containers"]
    drain_s = float(_env(gateway)["PARLEY_GATEWAY_DRAIN_S"])
    prestop_s = gateway["lifecycle"]["preStop"]["sleep"]["seconds"]
    # operations.md: keep the grace period above PARLEY_GATEWAY_DRAIN_S plus about 10 s, counted after preStop
    assert pod["terminationGracePeriodSeconds"] >= prestop_s + drain_s + 10
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert _of(docs, "PodDisruptionBudget")["gateway"]["spec"]["maxUnavailable"] == 1
    assert _of(docs, "Deployment")["gateway"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_engines_outlive_their_workers_drain(fleet) -> None:
    _, docs = fleet
    for name, pod in _pods(docs):
        worker = next((c for c in pod["containers"] if c["name"] == "worker"), None)
        if worker is None:
            continue
        drain_s = float(_env(worker)["PARLEY_WORKER_DRAIN_TIMEOUT_S"])
        assert pod["terminationGracePeriodSeconds"] > drain_s, name
        for engine in (c for c in pod["containers"] if c["name"].startswith("sglang")):
            assert engine["lifecycle"]["preStop"]["sleep"]["seconds"] > drain_s, name


def test_gateway_scales_on_the_open_streams_gauge() -> None:
    so = _of(render(SPECS["example"]), "ScaledObject")["gateway"]["spec"]
    (trigger,) = so["triggers"]
    assert trigger["type"] == "prometheus" and k8s_parley.OPEN_STREAMS in trigger["metadata"]["query"]
    assert so["minReplicaCount"] >= 2


def test_the_gateways_scaling_gauge_is_exported() -> None:
    from prometheus_client import Gauge

    from parley import metrics

    gauges = {family.name for series in vars(metrics).values() if isinstance(series, Gauge) for family in series.describe()}
    assert k8s_parley.OPEN_STREAMS in gauges


# ------------------------------------------------------------------ wiring


def test_workers_front_their_own_engines(fleet) -> None:
    spec, docs = fleet
    services = _of(docs, "Service")
    for pool in spec.pools:
        name = f"worker-{pool.name}"
        workload = {**_of(docs, "Deployment"), **_of(docs, "LeaderWorkerSet")}[name]
        pod = _pods([workload])[0][1]
        worker = next(c for c in pod["containers"] if c["name"] == "worker")
        urls = _env(worker)["PARLEY_WORKER_ENGINE_URLS"].split(",")
        assert _env(worker)["PARLEY_WORKER_MODEL"] == pool.served_model_name
        if pool.disaggregation:  # the router's Service, at the router's port
            (url,) = urls
            host, port = re.fullmatch(r"http://([^.]+)\.[^:]+:(\d+)", url).groups()
            assert int(port) in [p["port"] for p in services[host]["spec"]["ports"]]
            continue
        engine_ports = [c["ports"][0]["containerPort"] for c in pod["containers"] if c["name"].startswith("sglang")]
        assert urls == [f"http://127.0.0.1:{p}" for p in engine_ports]
        assert len(urls) == pool.engines_per_worker and len(set(urls)) == len(urls)
        for c in pod["containers"]:
            if c["name"].startswith("sglang"):
                argv = c["command"]
                assert argv[argv.index("--port") + 1] == str(c["ports"][0]["containerPort"])


def test_the_pd_router_finds_the_pools_leaders_and_may_list_pods() -> None:
    docs = render(SPECS["example"])
    router = _of(docs, "Deployment")["frontier-router"]["spec"]["template"]["spec"]["containers"][0]["command"]
    for role in ("prefill", "decode"):
        wanted = dict(kv.split("=") for kv in router[router.index(f"--{role}-selector") + 1 :][:3])
        template = _of(docs, "LeaderWorkerSet")[f"frontier-{role}"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        # LeaderWorkerSet adds the worker index itself (0 on the leader)
        assert wanted.items() - template["metadata"]["labels"].items() == {(sglang.LEADER_LABEL[0], "0")}
    prefill = _of(docs, "LeaderWorkerSet")["frontier-prefill"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert prefill["metadata"]["annotations"] == {sglang.BOOTSTRAP_PORT_ANNOTATION: "8998"}
    (rule,) = _of(docs, "Role")["frontier-router"]["rules"]
    assert rule["resources"] == ["pods"] and set(rule["verbs"]) == {"get", "list", "watch"}


def test_every_metrics_port_is_scraped(fleet) -> None:
    _, docs = fleet
    monitors = _of(docs, "ServiceMonitor")
    for name, svc in _of(docs, "Service").items():
        ports = {p["name"] for p in svc["spec"]["ports"]}
        scraped = {e["port"] for e in monitors[name]["spec"]["endpoints"]}
        assert scraped <= ports, name
        assert ports - scraped <= {"http"} or name == "gateway", name  # what is not scraped is only traffic


def test_settings_are_real_and_secrets_are_the_documented_ones(fleet) -> None:
    from tools.cli import _settings_by_service

    known = {name for _, cls in _settings_by_service() for name, _, _ in describe(cls)}
    _, docs = fleet
    config = _of(docs, "ConfigMap")[k8s_parley.CONFIG]["data"]
    set_here = {k for k in config if k.startswith("PARLEY_")}
    secrets = set()
    for _, pod in _pods(docs):
        for c in pod["containers"]:
            set_here |= {e["name"] for e in c.get("env", []) if e["name"].startswith("PARLEY_")}
            secrets |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
        secrets |= {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    assert set_here <= known, set_here - known
    assert secrets == {s.name for s in k8s_parley.SECRETS} | {"parley-hf"}
    assert config["PARLEY_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and config["PARLEY_CASSANDRA_SSL"] == "true"


def test_everything_is_in_the_specs_namespace_and_labelled_for_its_file(fleet) -> None:
    spec, docs = fleet
    for d in docs:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == spec.namespace, d["metadata"]["name"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "parley"


def test_the_dashboard_ships_for_the_grafana_sidecar() -> None:
    import json

    cm = _of(render(SPECS["example"]), "ConfigMap")["parley-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["parley.json"]) == json.loads(DASHBOARD.read_text())


# ------------------------------------------------------------------ refusals and the directory


@pytest.mark.parametrize("pool", ["medium", "frontier"])
def test_a_pool_whose_replicas_are_groups_of_pods_refuses_several_engines_per_worker(pool) -> None:
    data = _example_data()
    for p in data["pools"]:
        if p["name"] == "medium":
            p.update(nodes_per_replica=2, tp=4, ep=2)
        if p["name"] == pool:
            p["engines_per_worker"] = 2
    i = [p["name"] for p in data["pools"]].index(pool)
    with pytest.raises(ConfigError, match=rf"pools\[{i}\]\.engines_per_worker"):
        render(parse(copy.deepcopy(data)))


def test_write_makes_a_kustomize_directory_of_every_manifest(tmp_path: Path) -> None:
    docs = render(SPECS["example"])
    paths = write(docs, tmp_path)
    kustomization = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == sorted(p.name for p in paths if p.name != "kustomization.yaml")
    written = [d for name in kustomization["resources"] for d in yaml.safe_load_all((tmp_path / name).read_text())]
    assert written == docs
    assert not any("&id" in p.read_text() for p in paths)  # no YAML anchors: every object written out in full
    assert {"gateway.yaml", "worker-small.yaml", "frontier-router.yaml", "dashboard.yaml"} <= {p.name for p in paths}
    assert GATEWAY.name == "gateway"
