#!/usr/bin/env bash
# kubeconform and the schemas it validates the rendered manifests against, offline from then on.
#
# Nothing comes from GitHub: kubeconform is built from the Go module proxy, the core Kubernetes schemas
# come from the PyPI package kubernetes-validate (a dev dependency, already in .venv), and the CRDs of
# KEDA, the Prometheus operator and LeaderWorkerSet from their Go modules (tools/fleet/k8s_schemas.py
# pins the versions). Idempotent: a second run checks the version stamps and does nothing.
#
#   bash tools/fleet/install_kubeconform.sh      # then: .tools/bin/kubeconform, .tools/k8s-schemas/
set -euo pipefail

KUBECONFORM_VERSION=v0.8.0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLS="$ROOT/.tools"
BIN="$TOOLS/bin"
SCHEMAS="$TOOLS/k8s-schemas"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

command -v go >/dev/null || { echo "install_kubeconform: needs Go (go install, go mod download)" >&2; exit 1; }
"$PYTHON" -c 'import kubernetes_validate' 2>/dev/null \
  || { echo "install_kubeconform: needs the PyPI package kubernetes-validate in $PYTHON's environment" >&2; exit 1; }

# A binary from `go install` reports "development" to -v; its build info names the module version.
installed="$(go version -m "$BIN/kubeconform" 2>/dev/null | awk '$1 == "mod" {print $3}' || true)"
if [[ "$installed" != "$KUBECONFORM_VERSION" ]]; then
  mkdir -p "$BIN"
  GOBIN="$BIN" GOFLAGS=-mod=mod go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
fi

# The schemas are rebuilt when the pins change (k8s_schemas.py) or kubernetes-validate does.
stamp="$(cd "$ROOT" && "$PYTHON" -c '
import importlib.metadata as m
from tools.fleet import k8s_schemas as s
print(s.KUBERNETES_VERSION, m.version("kubernetes-validate"), *(f"{c.module}@{c.version}" for c in s.CRD_SOURCES))')"
if [[ "$(cat "$SCHEMAS/.stamp" 2>/dev/null || true)" != "$stamp" ]]; then
  rm -rf "$SCHEMAS.new"
  (cd "$ROOT" && "$PYTHON" -m tools.fleet.k8s_schemas "$SCHEMAS.new")
  echo "$stamp" > "$SCHEMAS.new/.stamp"
  rm -rf "$SCHEMAS" && mv "$SCHEMAS.new" "$SCHEMAS"
fi
echo "kubeconform $KUBECONFORM_VERSION in $BIN, schemas in $SCHEMAS"
