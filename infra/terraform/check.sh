#!/usr/bin/env bash
# Static checks of infra/terraform that need neither cloud credentials nor provider downloads:
# terraform fmt (the terraform CLI must be on PATH), checkov (installed into a venv of its own, pinned, so
# its many exact dependency pins never touch the project's .venv) and the provider-schema check.
#
#   infra/terraform/check.sh install   create the checkov venv if missing or another version, and fetch the
#                                      provider schemas (~80 MB) if missing: idempotent, what `make` runs
#   infra/terraform/check.sh fmt       terraform fmt -check -recursive -diff
#   infra/terraform/check.sh checkov   checkov over infra/terraform: exit 1 on any failed check
#   infra/terraform/check.sh schemas   every resource/data block against its provider's schema (provider_schemas.py)
#   infra/terraform/check.sh           install, then the three checks
#
# PARLEY_CHECKOV_VENV moves the venv (default .tools/checkov); PYTHON picks the interpreter that makes it;
# PARLEY_TERRAFORM_DIR checks another tree (the tests point it at trees that must fail).
set -euo pipefail

CHECKOV_VERSION="3.3.30"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TF_DIR="${PARLEY_TERRAFORM_DIR:-$ROOT/infra/terraform}"
CHECKOV_VENV="${PARLEY_CHECKOV_VENV:-$ROOT/.tools/checkov}"
CHECKOV="$CHECKOV_VENV/bin/checkov"
PYTHON="${PYTHON:-python3}"
# The project's venv (python-hcl2) runs provider_schemas.py; the schemas are cached under .tools.
SCHEMAS=("$ROOT/.venv/bin/python" "$ROOT/infra/terraform/provider_schemas.py")
SCHEMA_DIR="$ROOT/.tools/provider-schemas"

install_checkov() {
    if [[ -x "$CHECKOV" ]] && [[ "$("$CHECKOV" --version 2>/dev/null)" == "$CHECKOV_VERSION" ]]; then
        return 0
    fi
    echo "installing checkov $CHECKOV_VERSION into $CHECKOV_VENV" >&2
    rm -rf "$CHECKOV_VENV"
    "$PYTHON" -m venv "$CHECKOV_VENV"
    if [[ -x "$ROOT/.venv/bin/uv" ]]; then  # the project's uv (make install): seconds instead of a minute of pip
        "$ROOT/.venv/bin/uv" pip install --quiet --python "$CHECKOV_VENV/bin/python" "checkov==$CHECKOV_VERSION"
    else
        "$CHECKOV_VENV/bin/python" -m pip install --quiet --upgrade pip
        "$CHECKOV_VENV/bin/python" -m pip install --quiet "checkov==$CHECKOV_VERSION"
    fi
}

install() {
    install_checkov
    "${SCHEMAS[@]}" fetch "$SCHEMA_DIR"
}

fmt() {
    if ! command -v terraform >/dev/null; then
        echo "terraform is not on PATH: install the Terraform CLI (>= 1.10) to check formatting" >&2
        return 1
    fi
    terraform fmt -check -recursive -diff "$TF_DIR"
}

# --skip-download: no calls to Prisma Cloud (no network needed, no policy from outside the repo).
# Every suppression is an inline #checkov:skip=<id>:<reason> beside the resource it excuses.
# With no options: only the failures, briefly; `check.sh checkov -o json` gives every result.
run_checkov() {
    install_checkov
    if [[ $# -eq 0 ]]; then
        set -- --quiet --compact
    fi
    "$CHECKOV" --directory "$TF_DIR" --framework terraform --skip-download "$@"
}

schemas() {
    "${SCHEMAS[@]}" check "$TF_DIR" "$SCHEMA_DIR"
}

case "${1:-all}" in
    install) install ;;
    fmt) fmt ;;
    checkov) shift; run_checkov "$@" ;;
    schemas) schemas ;;
    all) install && fmt && run_checkov && schemas ;;
    *) echo "usage: $0 [install|fmt|checkov [checkov options]|schemas|all]" >&2; exit 2 ;;
esac
