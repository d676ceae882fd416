"""The rendered manifests, checked for what kubeconform cannot see: caps, sizes, drains, GPU placement, wiring,
and the contract with infra/terraform (the ConfigMaps, Secrets, mount paths, service accounts, node labels and
EFA it provides), read from its HCL so the two cannot drift apart.

tests/integration/test_k8s_manifests.py validates the same output against the API's schemas.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.errors import ConfigError
from parley.settings import describe
from schemas.catalog import TOPICS, inference_topic
from tests.unit.infra.test_terraform_wiring import PARSER_KEYS, TERRAFORM, unquote
from tests.unit.infra.test_terraform_wiring import parse as parse_terraform
from tools.fleet import k8s_engines, k8s_objects, k8s_parley, sglang
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
        for c in [*pod["containers"], *pod.get("initContainers", [])]:
            for side in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][side]), (name, c["name"], side)


def test_every_container_drops_all_capabilities_and_runs_non_root_but_the_rdma_engines(fleet) -> None:
    _, docs = fleet
    for name, pod in _pods(docs):
        rdma = any("--disaggregation-mode" in c["command"] for c in pod["containers"])
        assert pod["securityContext"]["runAsNonRoot"] is not rdma, name
        assert pod["automountServiceAccountToken"] is name.endswith("-router"), name
        for c in [*pod["containers"], *pod.get("initContainers", [])]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            assert sc["capabilities"].get("add", []) == (["IPC_LOCK"] if rdma else [])
            is_engine = c["command"][:3] == list(sglang.SERVER)  # compile caches: see k8s_engines
            assert sc["readOnlyRootFilesystem"] is not is_engine, (name, c["name"])


def test_gpu_pods_select_and_tolerate_gpu_nodes_and_others_stay_off_them(fleet) -> None:
    spec, docs = fleet
    gpu_types = {p.name: p.gpu.type for p in spec.pools}
    for name, pod in _pods(docs):
        gpus = sum(c["resources"]["limits"].get("nvidia.com/gpu", 0) for c in pod["containers"])
        if gpus:
            pool = pod["nodeSelector"]["parley.dev/pool"]
            assert pod["nodeSelector"] == {"nvidia.com/gpu.product": gpu_types[pool], "parley.dev/pool": pool}, name
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            assert any(v["name"] == "dshm" and v["emptyDir"]["medium"] == "Memory" for v in pod["volumes"])
            for c in pod["containers"]:
                r = c["resources"]
                assert r["requests"].get("nvidia.com/gpu") == r["limits"].get("nvidia.com/gpu"), (name, c["name"])
        else:
            assert "nodeSelector" not in pod and "tolerations" not in pod, name


def test_document_workers_scan_with_freshclams_signatures_fetched_before_they_start(fleet) -> None:
    _, docs = fleet
    [pod] = [p for name, p in _pods(docs) if name == "documents"]
    [init] = pod["initContainers"]
    worker, daemon = pod["containers"]
    assert init["command"][0] == daemon["command"][0] == "freshclam" and "--daemon" in daemon["command"]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["PARLEY_DOCUMENTS_REAL_SIGNATURES"] == "true"  # the worker refuses the shipped test signatures
    db = env["PARLEY_DOCUMENTS_CLAMAV_DB"]
    assert {"name": "clamav", "mountPath": db, "readOnly": True} in worker["volumeMounts"]
    for writer in (init, daemon):
        assert any(m["name"] == "clamav" and m["mountPath"] == db and not m.get("readOnly") for m in writer["volumeMounts"])
    assert any(v["name"] == "clamav" for v in pod["volumes"])
    conf = init["command"][1].split("=", 1)[1].removeprefix("/app/")
    assert f"DatabaseDirectory {db}\n" in (Path(__file__).resolve().parents[3] / conf).read_text()
    others = [p for name, p in _pods(docs) if name != "documents"]
    assert not [p for p in others if "initContainers" in p and any(c["name"] == "freshclam" for c in p["initContainers"])]


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


def test_the_gateways_metrics_are_scraped_on_their_own_port_never_the_apis() -> None:
    docs = render(SPECS["example"])
    endpoints = _of(docs, "ServiceMonitor")["gateway"]["spec"]["endpoints"]
    assert [e["port"] for e in endpoints] == ["metrics"]
    (gateway,) = _of(docs, "Deployment")["gateway"]["spec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in gateway["ports"]}["metrics"] != 8000


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


def test_every_process_renders_each_pool_in_its_models_template(fleet) -> None:
    """Workers, the titler and the context builder all read PARLEY_POOL_TEMPLATES from parley-config."""
    from parley.settings import from_env
    from workers.settings import TemplateSettings

    spec, docs = fleet
    data = _of(docs, "ConfigMap")[k8s_parley.CONFIG]["data"]
    templates = from_env(TemplateSettings, {"PARLEY_POOL_TEMPLATES": data["PARLEY_POOL_TEMPLATES"]})
    assert {p.name: templates.of(p.name).family for p in spec.pools} == {p.name: p.template for p in spec.pools}
    assert templates.of("small").family == "llama3"  # Llama-3.1 in both specs, not the local stack's ChatML


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


def test_the_settings_rendered_are_real_ones(fleet) -> None:
    from tools.cli import _settings_by_service

    known = {name for _, cls in _settings_by_service() for name, _, _ in describe(cls)}
    _, docs = fleet
    set_here = {k for k in _of(docs, "ConfigMap")[k8s_parley.CONFIG]["data"] if k.startswith("PARLEY_")}
    for _, pod in _pods(docs):
        for c in pod["containers"]:
            set_here |= {e["name"] for e in c.get("env", []) if e["name"].startswith("PARLEY_")}
    assert set_here <= known, set_here - known


def test_everything_is_in_the_specs_namespace_and_labelled_for_its_file(fleet) -> None:
    spec, docs = fleet
    for d in docs:
        assert d["metadata"]["namespace"] == spec.namespace, d["metadata"]["name"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "parley"


# ------------------------------------------------------------------ the contract with infra/terraform


def _blocks(directory: Path, kind: str) -> dict[str, dict]:
    """``kind`` blocks (resource, variable) of a Terraform directory by their labels: "type.name" or "name"."""
    out: dict[str, dict] = {}
    for document in parse_terraform(directory).bodies:
        for block in document.get(kind, []):
            for label, body in block.items():
                if kind == "resource":
                    out.update({f"{unquote(label)}.{unquote(name)}": b for name, b in body.items() if name not in PARSER_KEYS})
                else:
                    out[unquote(label)] = body
    return out


def _plain(value: Any) -> Any:
    """A parsed HCL constant without python-hcl2's quotes and block markers."""
    if isinstance(value, dict):
        return {unquote(k): _plain(v) for k, v in value.items() if k not in PARSER_KEYS}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return unquote(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class Connection:
    """What infra/terraform/modules/parley-connection puts in the namespace for Parley's pods."""

    settings: dict[str, str]  # parley-infra's data, as HCL expressions
    mounts: dict[str, str]  # local.mounts
    secrets: dict[str, set[str]]  # Secret name -> its keys
    config_maps: dict[str, set[str]]  # ConfigMap name -> its keys (parley-infra's: the settings)


def _connection() -> Connection:
    directory = TERRAFORM / "modules" / "parley-connection"
    local = _plain(parse_terraform(directory).locals)
    settings, made = local["settings"], {"kubernetes_secret_v1": {}, "kubernetes_config_map_v1": {}}
    for label, body in _blocks(directory, "resource").items():
        kind = label.split(".")[0]
        data = _plain(body["data"])
        made[kind][_plain(body["metadata"])[0]["name"]] = set(settings if data == "${local.settings}" else data)
    return Connection(settings, local["mounts"], made["kubernetes_secret_v1"], made["kubernetes_config_map_v1"])


CONNECTION = _connection()
#: ``"${local.mounts.kafka}/password"`` -> (kafka, password): a setting that names a file Terraform mounts.
MOUNTED_FILE = re.compile(r"^\$\{local\.mounts\.(\w+)\}/(.+)$")


def _parley_containers(docs: list[Doc]) -> list[tuple[str, Doc, Doc]]:
    """(workload, pod, container) of every container that runs a Parley process."""
    return [(name, pod, c) for name, pod in _pods(docs) for c in pod["containers"] if c["command"][:2] == ["python", "-m"]]


def test_the_renderer_reads_terraforms_connection_settings_and_sets_none_of_them(fleet) -> None:
    _, docs = fleet
    infra = set(CONNECTION.settings)
    assert k8s_parley.INFRA_CONFIG in CONNECTION.config_maps and k8s_parley.INFRA_CONFIG not in _of(docs, "ConfigMap")
    rendered = set(_of(docs, "ConfigMap")[k8s_parley.CONFIG]["data"])
    assert rendered and not rendered & infra, rendered & infra  # each setting has one owner
    assert {"PARLEY_KAFKA_BOOTSTRAP", "PARLEY_CASSANDRA_HOSTS", "PARLEY_DOCUMENTS_BLOB_URL", "PARLEY_KMS_KEY_ID"} <= infra
    for name, _, c in _parley_containers(docs):
        sources = [ref["configMapRef"]["name"] for ref in c["envFrom"]]
        assert sources == [k8s_parley.INFRA_CONFIG, k8s_parley.CONFIG], (name, c["name"])
        assert not {e["name"] for e in c.get("env", [])} & infra, (name, c["name"])  # env would override parley-infra
        assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in c.get("env", [])), (name, c["name"])


def test_every_file_a_terraform_setting_names_is_mounted_from_the_object_that_holds_it(fleet) -> None:
    _, docs = fleet
    files = {key: MOUNTED_FILE.match(value) for key, value in CONNECTION.settings.items()}
    files = {key: m.groups() for key, m in files.items() if m}
    assert {"PARLEY_KAFKA_SASL_PASSWORD_FILE", "PARLEY_CASSANDRA_PASSWORD_FILE"} <= set(files)
    assert "PARLEY_KMS_KEY_FILE" not in CONNECTION.settings  # no key-encryption key reaches a pod: AWS KMS holds it
    for name, pod, c in _parley_containers(docs):
        volumes = {v["name"]: v for v in pod["volumes"]}
        at = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
        for setting, (mount, key) in files.items():
            volume = at[CONNECTION.mounts[mount]]  # mounted at Terraform's path...
            if "secret" in volume:  # ...from a Terraform object that has the key
                assert key in CONNECTION.secrets[volume["secret"]["secretName"]], (name, setting)
            else:
                assert key in CONNECTION.config_maps[volume["configMap"]["name"]], (name, setting)


def test_the_manifests_reference_exactly_what_terraform_makes(fleet) -> None:
    _, docs = fleet
    referenced: set[str] = set()
    for _, pod in _pods(docs):
        for v in pod.get("volumes", []):
            referenced |= {v["secret"]["secretName"]} if "secret" in v else set()
            referenced |= {v["configMap"]["name"]} if "configMap" in v else set()
        for c in pod["containers"]:
            referenced |= {ref["configMapRef"]["name"] for ref in c.get("envFrom", [])}
            referenced |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
    (auth,) = _of(docs, "TriggerAuthentication").values()
    referenced |= {ref["name"] for ref in auth["spec"]["secretTargetRef"]}
    rendered = set(_of(docs, "ConfigMap"))
    optional = {k8s_engines.HF_SECRET}  # the operator's, for gated models
    assert referenced - rendered - optional == set(CONNECTION.secrets) | set(CONNECTION.config_maps)
    assert not rendered & (set(CONNECTION.secrets) | set(CONNECTION.config_maps))
    assert not {"Secret", "Namespace"} & {d["kind"] for d in docs}  # Terraform's, one owner each


def test_kedas_kafka_login_and_brokers_are_terraforms(fleet) -> None:
    _, docs = fleet
    (auth,) = _of(docs, "TriggerAuthentication").values()
    refs = auth["spec"]["secretTargetRef"]
    assert {(r["name"], r["key"]) for r in refs} == {(k8s_parley.KEDA_KAFKA, key) for key in CONNECTION.secrets[k8s_parley.KEDA_KAFKA]}
    assert all(r["parameter"] == r["key"] for r in refs)  # Terraform names the keys after KEDA's parameters
    workloads = {**_of(docs, "Deployment"), **_of(docs, "LeaderWorkerSet")}
    kafka_triggers = 0
    for so in _of(docs, "ScaledObject").values():
        ref = so["spec"]["scaleTargetRef"]
        for trigger in so["spec"]["triggers"]:
            if trigger["type"] != "kafka":
                continue
            kafka_triggers += 1
            meta = trigger["metadata"]
            assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
            assert not {"bootstrapServers", "sasl", "tls"} & set(meta)  # Terraform's, not written twice
            assert meta["bootstrapServersFromEnv"] in CONNECTION.settings
            # KEDA reads the environment of the named container of a pod template at spec.template only
            assert ref["kind"] == "Deployment", so["metadata"]["name"]
            (container,) = [c for c in workloads[ref["name"]]["spec"]["template"]["spec"]["containers"] if c["name"] == ref["envSourceContainerName"]]
            assert {"configMapRef": {"name": k8s_parley.INFRA_CONFIG}} in container["envFrom"]
    assert kafka_triggers


def test_multi_node_workers_scale_on_the_lag_their_group_exports() -> None:
    docs = render(SPECS["variant"])
    so = _of(docs, "ScaledObject")["worker-medium"]["spec"]
    assert so["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    (trigger,) = so["triggers"]
    assert trigger["type"] == "prometheus"
    assert 'parley_consumer_lag{namespace="chat-prod", group="workers.medium"}' in trigger["metadata"]["query"]
    assert "max by (topic, partition)" in trigger["metadata"]["query"]  # every member exports the same rows


def _terraform_accounts() -> set[str]:
    variable = _blocks(TERRAFORM / "envs" / "production" / "platform", "variable")["parley_service_accounts"]
    return set(_plain(variable["default"]))


def test_pods_run_as_the_service_accounts_terraform_binds_and_all_of_them_are_rendered(fleet) -> None:
    _, docs = fleet
    bound = _terraform_accounts()
    assert set(_of(docs, "ServiceAccount")) >= bound
    for name, pod, _ in _parley_containers(docs):
        assert pod["serviceAccountName"] in bound, name
    for name, pod in _pods(docs):
        assert pod["serviceAccountName"] in _of(docs, "ServiceAccount"), name
    accounts = {_of(docs, "Deployment")[s.name]["spec"]["template"]["spec"]["serviceAccountName"] for s in k8s_parley.group_services()}
    assert accounts == {"parley-streams", "parley-documents"}  # the tool executor runs as the processors (streams.tool_executor)
    assert _of(docs, "Deployment")["gateway"]["spec"]["template"]["spec"]["serviceAccountName"] == "parley-gateway"
    # The others (SGLang alone, the PD router) make no AWS calls, so Terraform binds them to no role.
    assert set(_of(docs, "ServiceAccount")) - bound <= {n for n in _of(docs, "ServiceAccount") if n.startswith("frontier-")}


def test_terraform_makes_the_example_specs_namespace() -> None:
    addons = _blocks(TERRAFORM / "modules" / "cluster-addons", "variable")
    identity = _blocks(TERRAFORM / "modules" / "workload-identity", "variable")
    assert _plain(addons["parley_namespace"]["default"]) == _plain(identity["namespace"]["default"]) == SPECS["example"].namespace


def test_efa_goes_to_engines_that_talk_to_other_nodes_and_matches_terraforms_node_groups(fleet) -> None:
    spec, docs = fleet
    for name, pod in _pods(docs):
        for c in pod["containers"]:
            limits = c["resources"]["limits"]
            cross_node = "--disaggregation-mode" in c["command"] or "--nnodes" in c["command"]
            wanted = k8s_engines.EFA_PER_GPU * limits["nvidia.com/gpu"] if cross_node else 0
            assert limits.get(k8s_objects.EFA_RESOURCE, 0) == wanted, (name, c["name"])
            assert c["resources"]["requests"].get(k8s_objects.EFA_RESOURCE, 0) == wanted
    if spec is not SPECS["example"]:
        return
    groups = _plain(_blocks(TERRAFORM / "envs" / "production" / "platform", "variable")["gpu_node_groups"]["default"])
    for group in groups.values():  # each node's interfaces are what its GPUs' engines take
        pool = spec.pool(group["pool"])
        assert group["gpu_product"] == pool.gpu.type
        expected = k8s_engines.EFA_PER_GPU * group["gpus_per_node"] if pool.disaggregation or pool.nodes_per_replica > 1 else 0
        assert group.get("efa_interfaces", 0) == expected, group


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
