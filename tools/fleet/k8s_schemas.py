"""The JSON schemas kubeconform validates the rendered manifests against, prepared offline.

Two sources, both pinned, neither a GitHub download:

- the core Kubernetes kinds from the PyPI package ``kubernetes-validate`` (Apache-2.0), which ships the
  API's schemas per release; its files point into one shared ``_definitions.json`` by an absolute
  ``$ref``, which kubeconform cannot follow from a local file, so each kind is written out standalone
  (its definitions inlined under ``$defs``);
- the custom resources (KEDA, the Prometheus operator, LeaderWorkerSet) from their CRDs in the Go
  modules of the projects that define them (``go mod download`` from the Go module proxy), each
  ``openAPIV3Schema`` turned into a strict JSON schema: an object that lists its properties admits no
  others, as the API server's structural pruning would drop them.

``python -m tools.fleet.k8s_schemas OUT`` writes ``OUT/core/<kind>-<group>-<version>.json`` and
``OUT/crd/<group>/<kind>_<version>.json`` (the layouts of ``SCHEMA_LOCATIONS``); install_kubeconform.sh
runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: The Kubernetes release the core schemas are of (kubernetes-validate ships one directory per release).
KUBERNETES_VERSION = "1.33.0"


@dataclass(frozen=True)
class CrdSource:
    module: str  # Go module path
    version: str
    files: tuple[str, ...]  # CRD YAML files inside the module


CRD_SOURCES = (
    CrdSource(
        "github.com/kedacore/keda/v2",
        "v2.21.0",
        ("config/crd/bases/keda.sh_scaledobjects.yaml", "config/crd/bases/keda.sh_triggerauthentications.yaml"),
    ),
    CrdSource(
        "github.com/prometheus-operator/prometheus-operator",
        "v0.85.0",
        ("example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",),
    ),
    CrdSource("sigs.k8s.io/lws", "v0.7.0", ("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",)),
)

#: kubeconform's -schema-location templates, relative to the prepared directory.
SCHEMA_LOCATIONS = (
    "core/{{.ResourceKind}}{{.KindSuffix}}.json",
    "crd/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json",
)

_DEFS_REF = "/api/_definitions.json#/$defs/"


# ------------------------------------------------------------------ core kinds (kubernetes-validate)


def core_schema_dir() -> Path:
    import kubernetes_validate

    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = root / f"v{KUBERNETES_VERSION}-local-strict"
    if not path.is_dir():
        raise FileNotFoundError(f"kubernetes-validate has no schemas of Kubernetes {KUBERNETES_VERSION} under {root}")
    return path


def standalone(kind_schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """``kind_schema`` with every definition it reaches copied under its own ``$defs`` (refs made local)."""
    needed: dict[str, Any] = {}
    pending = list(_refs(kind_schema))
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed[name] = definitions[name]
        pending.extend(_refs(definitions[name]))
    out = _localised({k: v for k, v in kind_schema.items() if k != "$id"})
    out["$defs"] = {name: _localised(schema) for name, schema in sorted(needed.items())}
    return out


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _localised(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: ("#/$defs/" + v.rsplit("/", 1)[-1] if k == "$ref" and isinstance(v, str) else _localised(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_localised(v) for v in node]
    return node


def write_core(out: Path) -> int:
    source = core_schema_dir()
    definitions = json.loads((source / "_definitions.json").read_text())["$defs"]
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted(source.glob("*.json")):
        schema = json.loads(path.read_text())
        if "enum" not in schema.get("properties", {}).get("kind", {}):
            continue  # not a kind of its own (a spec, a status, a list item)
        (out / path.name).write_text(json.dumps(standalone(schema, definitions)))
        written += 1
    return written


# ------------------------------------------------------------------ custom resources (Go modules)


def module_zip(source: CrdSource) -> Path:
    """The module's zip in the Go module cache, downloaded through the Go module proxy if missing."""
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{source.module}@{source.version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode or "Zip" not in info:
        raise RuntimeError(f"go mod download {source.module}@{source.version} failed: {info.get('Error') or result.stderr}")
    return Path(info["Zip"])


def crd_documents(source: CrdSource) -> Iterator[dict[str, Any]]:
    prefix = f"{source.module}@{source.version}/"
    with zipfile.ZipFile(module_zip(source)) as archive:
        for name in source.files:
            yield yaml.safe_load(archive.read(prefix + name))


def strict(node: Any) -> Any:
    """An OpenAPI v3 schema of a CRD as a strict JSON schema (kubeconform's openapi2jsonschema rules)."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items() if k != "nullable"}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def write_crds(out: Path) -> list[Path]:
    written = []
    for source in CRD_SOURCES:
        for crd in crd_documents(source):
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"].lower()
            for version in crd["spec"]["versions"]:
                path = out / group / f"{kind}_{version['name']}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(strict(version["schema"]["openAPIV3Schema"])))
                written.append(path)
    return written


def prepare(out: Path) -> str:
    """Write both trees under ``out``; says what it wrote."""
    core = write_core(out / "core")
    crds = write_crds(out / "crd")
    sources = ", ".join(f"{s.module}@{s.version}" for s in CRD_SOURCES)
    return f"{core} core kinds of Kubernetes {KUBERNETES_VERSION}, {len(crds)} CRD versions from {sources}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tools.fleet.k8s_schemas OUT_DIR")
    print(prepare(Path(sys.argv[1])))
