"""Kubernetes objects as plain dicts: the few shapes every component of the fleet is built from.

Each builder returns what ``kubectl apply`` takes, with nothing left to defaults that
matter here: every container has requests and limits and a locked-down security
context, every object the labels that ``write`` files it by and the Prometheus
operator and KEDA select on. ``tools/fleet/k8s_parley.py`` and ``k8s_engines.py``
compose them; nothing here knows a Parley service or an SGLang flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]

PART_OF = "parley"
#: The label ``write`` files an object under (one file per component).
COMPONENT = "app.kubernetes.io/name"
#: What kind of component it is (gateway, processor, worker, engine, router): ServiceMonitors select on it.
ROLE = "app.kubernetes.io/component"
#: A pool's objects, and the GPU nodes of its node groups (infra/terraform/modules/eks labels them so).
POOL = "parley.dev/pool"
#: GPU nodes' model label (the NVIDIA device plugin's, which infra/terraform sets from ``gpu_product``).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The GPU nodes' resource and taint key (tainted ``nvidia.com/gpu=present:NoSchedule`` by infra/terraform).
GPU_RESOURCE = "nvidia.com/gpu"
#: EFA interfaces, the AWS EFA device plugin's resource on the nodes of groups with ``efa_interfaces``.
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: Every Parley process serves /metrics here in the cluster, the gateway too (never on its API port).
METRICS_PORT = 9100
#: uid/gid of Parley's processes: the image has no user of its own, so the pod names one.
PARLEY_UID = 10001


@dataclass(frozen=True)
class Sizing:
    """Requests and limits of one container (Kubernetes quantities)."""

    cpu: str
    memory: str
    cpu_limit: str
    memory_limit: str
    gpus: int = 0
    efa: int = 0  # EFA interfaces (RDMA to other nodes)

    def resources(self) -> Doc:
        requests: Doc = {"cpu": self.cpu, "memory": self.memory}
        limits: Doc = {"cpu": self.cpu_limit, "memory": self.memory_limit}
        for resource, count in ((GPU_RESOURCE, self.gpus), (EFA_RESOURCE, self.efa)):
            if count:  # extended resources: the request must equal the limit
                requests[resource] = limits[resource] = count
        return {"requests": requests, "limits": limits}


def labels(component: str, role: str, pool: str | None = None) -> dict[str, str]:
    out = {COMPONENT: component, ROLE: role, "app.kubernetes.io/part-of": PART_OF}
    if pool is not None:
        out[POOL] = pool
    return out


def selector(component: str) -> dict[str, str]:
    """The labels a component's pods are selected by (a subset of ``labels``: selectors are immutable)."""
    return {COMPONENT: component, "app.kubernetes.io/part-of": PART_OF}


def meta(name: str, namespace: str, label: dict[str, str], **extra: Any) -> Doc:
    return {"name": name, "namespace": namespace, "labels": dict(label), **extra}


def container(
    name: str,
    image: str,
    command: list[str],
    sizing: Sizing,
    *,
    env: Sequence[Doc] = (),
    ports: Sequence[Doc] = (),
    mounts: Sequence[Doc] = (),
    read_only_root: bool = True,
    **probes_and_more: Any,
) -> Doc:
    """One container: the command spelled out (no image entrypoint assumed), non-root, no capabilities."""
    out: Doc = {
        "name": name,
        "image": image,
        "command": list(command),
        "resources": sizing.resources(),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": read_only_root,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if env:
        out["env"] = list(env)
    if ports:
        out["ports"] = list(ports)
    if mounts:
        out["volumeMounts"] = list(mounts)
    out.update(probes_and_more)
    return out


def env_value(name: str, value: object) -> Doc:
    return {"name": name, "value": str(value)}


def env_field(name: str, path: str) -> Doc:
    """An environment variable from the pod's own fields (downward API), e.g. ``metadata.name``."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def port(name: str, number: int) -> Doc:
    return {"name": name, "containerPort": number, "protocol": "TCP"}


def http_probe(path: str, port_name: str, *, period_s: int, failures: int, timeout_s: int = 2) -> Doc:
    return {
        "httpGet": {"path": path, "port": port_name},
        "periodSeconds": period_s,
        "timeoutSeconds": timeout_s,
        "failureThreshold": failures,
    }


def tcp_probe(port_name: str, *, period_s: int, failures: int) -> Doc:
    return {"tcpSocket": {"port": port_name}, "periodSeconds": period_s, "failureThreshold": failures}


def pod_spec(
    containers: list[Doc],
    *,
    service_account: str,
    grace_s: int,
    volumes: Sequence[Doc] = (),
    gpu_nodes: dict[str, str] | None = None,
    root: bool = False,
    **more: Any,
) -> Doc:
    """A pod: its service account without an API token, non-root unless ``root``, on GPU nodes when
    ``gpu_nodes`` (the labels selected; their taint tolerated)."""
    uid = 0 if root else PARLEY_UID
    security: Doc = {
        "runAsNonRoot": not root,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    out: Doc = {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": grace_s,
        "securityContext": security,
        "containers": containers,
    }
    if volumes:
        out["volumes"] = list(volumes)
    if gpu_nodes is not None:
        out["nodeSelector"] = dict(gpu_nodes)
        out["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    out.update(more)
    return out


def empty_dir(name: str, *, memory: bool = False, size: str | None = None) -> Doc:
    source: Doc = {"medium": "Memory"} if memory else {}
    if size is not None:
        source["sizeLimit"] = size
    return {"name": name, "emptyDir": source}


def secret_volume(name: str, secret: str, *, optional: bool = False) -> Doc:
    return {"name": name, "secret": {"secretName": secret, "defaultMode": 0o440, "optional": optional}}


def config_map_volume(name: str, config_map: str) -> Doc:
    return {"name": name, "configMap": {"name": config_map, "defaultMode": 0o444}}


def mount(name: str, path: str, *, read_only: bool = False) -> Doc:
    return {"name": name, "mountPath": path, "readOnly": read_only}


def deployment(name: str, namespace: str, label: dict[str, str], pod: Doc, *, replicas: int | None, **strategy: Any) -> Doc:
    """``replicas`` None: the autoscaler's to set (written here, every apply would reset it to the floor)."""
    spec: Doc = {} if replicas is None else {"replicas": replicas}
    spec.update(
        selector={"matchLabels": selector(name)}, template={"metadata": {"labels": dict(label)}, "spec": pod}, **strategy
    )
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name, namespace, label), "spec": spec}


def service(
    name: str, namespace: str, label: dict[str, str], ports: list[tuple[str, int]], *, pods: dict[str, str] | None = None
) -> Doc:
    """A ClusterIP Service of the component's pods (or those ``pods`` selects), each port by name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, namespace, label),
        "spec": {
            "selector": pods or selector(label[COMPONENT]),
            "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ports],
        },
    }


def service_account(name: str, namespace: str, label: dict[str, str]) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(name, namespace, label),
        "automountServiceAccountToken": False,
    }


def disruption_budget(name: str, namespace: str, label: dict[str, str], *, max_unavailable: int = 1) -> Doc:
    """At most one pod of the component evicted at a time by a node drain or an upgrade."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(name, namespace, label),
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": selector(name)}},
    }


def service_monitor(name: str, namespace: str, label: dict[str, str], ports: list[str], path: str = "/metrics") -> Doc:
    """Prometheus operator: scrape ``path`` on each named port of the component's Service."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta(name, namespace, label),
        "spec": {
            "selector": {"matchLabels": selector(label[COMPONENT])},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{"port": p, "path": path, "interval": "15s"} for p in ports],
        },
    }


@dataclass(frozen=True)
class Scaling:
    """Bounds of a KEDA-scaled workload and how fast it moves (scale-down waits, then one pod at a time)."""

    min: int
    max: int
    scale_down_window_s: int = 300
    scale_down_period_s: int = 60


def scaled_object(
    name: str,
    namespace: str,
    label: dict[str, str],
    target: Doc,
    scaling: Scaling,
    triggers: list[Doc],
    **more: Any,
) -> Doc:
    """A KEDA ScaledObject (KEDA makes and owns the HPA ``keda-hpa-<name>`` from it)."""
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": scaling.scale_down_window_s,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": scaling.scale_down_period_s}],
        },
        "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Percent", "value": 100, "periodSeconds": 30}]},
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta(name, namespace, label),
        "spec": {
            "scaleTargetRef": target,
            "minReplicaCount": scaling.min,
            "maxReplicaCount": scaling.max,
            "pollingInterval": 15,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": triggers,
            **more,
        },
    }


def target(kind: str, name: str, api_version: str = "apps/v1", *, env_from: str | None = None) -> Doc:
    """A ScaledObject's target; ``env_from``: the container whose environment KEDA resolves ``…FromEnv`` in."""
    out = {"apiVersion": api_version, "kind": kind, "name": name}
    if env_from is not None:
        out["envSourceContainerName"] = env_from
    return out
