"""infra/terraform is wired together: what `terraform validate` would catch between modules, without providers.

Providers cannot be downloaded here, so `terraform init/validate` cannot run; this parses every directory of
.tf files with python-hcl2 and checks, for each module call, stack and tfvars example:

- a module call passes only inputs its module declares, and every input the module requires (no default);
- every ``module.X.Y`` names a module call X of the same directory whose module has an output Y;
- every ``var.X`` names a variable of the same directory;
- every output read from another stack (``data.terraform_remote_state.<stack>.outputs.Y``, directly or through a
  local that holds those outputs) is an output of the sibling stack directory named <stack>;
- every variable has a description and a type, every output a description;
- every key of a ``*.tfvars.example`` is a variable of its stack.

The unit cases at the bottom run the same checks on small wrong-on-purpose trees, so a checker that stopped
looking would fail them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import hcl2
import pytest

TERRAFORM = Path(__file__).resolve().parents[3] / "infra" / "terraform"

#: Arguments of a module block that are Terraform's, not the module's inputs.
META_ARGUMENTS = frozenset({"source", "version", "providers", "count", "for_each", "depends_on"})
#: Keys python-hcl2 adds to a parsed block.
PARSER_KEYS = frozenset({"__is_block__", "__comments__", "__inline_comments__", "__start_line__", "__end_line__"})

MODULE_REF = re.compile(r"\bmodule\.([A-Za-z_][\w-]*)(?:\[[^\]]*\])?\.([A-Za-z_][\w-]*)")
VAR_REF = re.compile(r"\bvar\.([A-Za-z_][\w-]*)")
REMOTE_STATE_REF = re.compile(r"\bdata\.terraform_remote_state\.([A-Za-z_][\w-]*)\.outputs\.([A-Za-z_][\w-]*)")
REMOTE_STATE_ALIAS = re.compile(r"^\$\{data\.terraform_remote_state\.([A-Za-z_][\w-]*)\.outputs\}$")


def unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


@dataclass(frozen=True)
class Directory:
    """One Terraform module or stack: a directory's .tf files, parsed."""

    path: Path
    variables: dict[str, dict] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    calls: dict[str, dict] = field(default_factory=dict)
    locals: dict[str, object] = field(default_factory=dict)
    bodies: list[object] = field(default_factory=list)  # every block, for the references in them


def parse(path: Path) -> Directory:
    found = Directory(path)
    for file in sorted(path.glob("*.tf")):
        with file.open() as f:
            document = hcl2.load(f)
        for kind, into in (("variable", found.variables), ("output", found.outputs), ("module", found.calls)):
            for block in document.get(kind, []):
                for name, body in block.items():
                    into[unquote(name)] = body
        for block in document.get("locals", []):
            found.locals.update({k: v for k, v in block.items() if k not in PARSER_KEYS})
        found.bodies.append(document)
    return found


def expressions(value: object) -> Iterator[str]:
    """The text inside every ``${...}`` of a parsed value: where references live (not in descriptions)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in PARSER_KEYS:
                yield from expressions(key)
                yield from expressions(item)
    elif isinstance(value, list):
        for item in value:
            yield from expressions(item)
    elif isinstance(value, str):
        i = 0
        while (start := value.find("${", i)) != -1:
            if start > 0 and value[start - 1] == "$":  # $${ is an escaped, literal ${
                i = start + 2
                continue
            depth, end = 0, start + 1
            while end < len(value):
                depth += {"{": 1, "}": -1}.get(value[end], 0)
                if depth == 0:
                    break
                end += 1
            yield value[start + 2 : end]
            i = end + 1


def directories(root: Path) -> list[Path]:
    return sorted({tf.parent for tf in root.rglob("*.tf") if ".terraform" not in tf.parts})


def problems(root: Path) -> list[str]:
    """Every wiring problem under ``root``, one line each, naming the file tree position."""
    parsed = {path: parse(path) for path in directories(root)}
    found: list[str] = []

    def where(path: Path) -> str:
        return str(path.relative_to(root)) or "."

    for path, directory in parsed.items():
        here = where(path)
        for name, body in directory.variables.items():
            if not unquote(str(body.get("description", ""))).strip():
                found.append(f"{here}: variable {name} has no description")
            if "type" not in body:
                found.append(f"{here}: variable {name} has no type")
        for name, body in directory.outputs.items():
            if not unquote(str(body.get("description", ""))).strip():
                found.append(f"{here}: output {name} has no description")

        targets: dict[str, Directory] = {}
        for call, body in directory.calls.items():
            source = unquote(str(body.get("source", "")))
            if not source.startswith(("./", "../")):
                found.append(f"{here}: module {call} has source {source!r}, not a local path this test can read")
                continue
            target = parsed.get((path / source).resolve())
            if target is None:
                found.append(f"{here}: module {call}: {source} is not a directory of .tf files")
                continue
            targets[call] = target
            inputs = {k for k in body if k not in PARSER_KEYS | META_ARGUMENTS}
            for extra in sorted(inputs - target.variables.keys()):
                found.append(f"{here}: module {call} passes {extra}, which {where(target.path)} does not declare")
            required = {n for n, v in target.variables.items() if "default" not in v}
            for missing in sorted(required - inputs):
                found.append(f"{here}: module {call} does not pass {missing}, which {where(target.path)} requires")

        aliases = {}
        for name, value in directory.locals.items():
            match = REMOTE_STATE_ALIAS.match(str(value))
            if match:
                aliases[name] = match.group(1)
        alias_names = "|".join(map(re.escape, aliases))
        alias_ref = re.compile(rf"\blocal\.({alias_names})\.([A-Za-z_][\w-]*)") if aliases else None

        for text in {t for body in directory.bodies for t in expressions(body)}:
            for call, output in MODULE_REF.findall(text):
                if call not in directory.calls:
                    found.append(f"{here}: module.{call}.{output}: no module {call} here")
                elif call in targets and output not in targets[call].outputs:
                    found.append(f"{here}: module.{call}.{output}: {where(targets[call].path)} has no output {output}")
            for name in VAR_REF.findall(text):
                if name not in directory.variables:
                    found.append(f"{here}: var.{name} is not declared here")
            remote = REMOTE_STATE_REF.findall(text) + (
                [(aliases[a], o) for a, o in alias_ref.findall(text)] if alias_ref else []
            )
            for stack, output in remote:
                other = parsed.get(path.parent / stack)
                if other is None:
                    found.append(f"{here}: remote state {stack}: no sibling stack directory {stack}")
                elif output not in other.outputs:
                    found.append(f"{here}: remote state {stack} has no output {output}")

        for example in sorted(path.glob("*.tfvars.example")):
            with example.open() as f:
                for key in hcl2.load(f):
                    if key not in PARSER_KEYS and key not in directory.variables:
                        found.append(f"{here}: {example.name} sets {key}, which is not a variable here")
    return sorted(set(found))


# ------------------------------------------------------------------ the real tree


def test_the_terraform_tree_is_wired_and_documented() -> None:
    assert directories(TERRAFORM), f"no .tf files under {TERRAFORM}"
    assert problems(TERRAFORM) == []


def test_every_stack_and_module_is_read() -> None:
    read = {str(p.relative_to(TERRAFORM)) for p in directories(TERRAFORM)}
    stacks = {"envs/production/platform", "envs/production/addons", "envs/production/datastores"}
    modules = {
        f"modules/{m}"
        for m in (
            "kms", "network", "eks", "kafka", "object-storage", "object-storage/bucket", "registry",
            "workload-identity", "cluster-addons", "cassandra", "parley-connection",
        )
    }
    assert stacks | modules <= read


def test_every_module_directory_is_called_by_a_stack() -> None:
    """A module no stack calls is dead code that the wiring checks would never reach through a call."""
    called = set()
    for path in directories(TERRAFORM):
        for body in parse(path).calls.values():
            called.add((path / unquote(str(body["source"]))).resolve())
    uncalled = [p for p in directories(TERRAFORM / "modules") if p not in called]
    assert uncalled == []


# ------------------------------------------------------------------ the checker, on trees wrong on purpose


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


MODULE = """
variable "name" {
  description = "required"
  type        = string
}
variable "size" {
  description = "optional"
  type        = number
  default     = 1
}
output "id" {
  description = "the id"
  value       = var.name
}
"""


def test_a_correct_tree_has_no_problems(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "modules/m/main.tf": MODULE,
            "stacks/a/main.tf": """
variable "n" {
  description = "a name"
  type        = string
}
module "m" {
  source = "../../modules/m"
  name   = var.n
}
output "id" {
  description = "m's id"
  value       = module.m.id
}
""",
            "stacks/a/terraform.tfvars.example": 'n = "x"\n',
            "stacks/b/main.tf": """
data "terraform_remote_state" "a" {
  backend = "s3"
}
locals {
  a = data.terraform_remote_state.a.outputs
}
output "both" {
  description = "a's id, twice"
  value       = [local.a.id, data.terraform_remote_state.a.outputs.id]
}
""",
        },
    )
    assert problems(root) == []


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('name = "x"\n  bogus = 1', "module m passes bogus, which modules/m does not declare"),
        ("size = 2", "module m does not pass name, which modules/m requires"),
    ],
)
def test_module_inputs_must_match_the_modules_variables(tmp_path: Path, call: str, expected: str) -> None:
    root = write(
        tmp_path,
        {"modules/m/main.tf": MODULE, "stack/main.tf": f'module "m" {{\n  source = "../modules/m"\n  {call}\n}}\n'},
    )
    assert problems(root) == [f"stack: {expected}"]


def test_a_module_reference_must_name_an_output_of_that_module(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "modules/m/main.tf": MODULE,
            "stack/main.tf": """
module "m" {
  source = "../modules/m"
  name   = "x"
}
output "o" {
  description = "wrong"
  value       = "${module.m.arn}-${module.other.id}"
}
""",
        },
    )
    assert problems(root) == [
        "stack: module.m.arn: modules/m has no output arn",
        "stack: module.other.id: no module other here",
    ]


def test_variables_need_a_description_and_a_type_and_outputs_a_description(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "m/main.tf": """
variable "untyped" {
  description = "has no type"
}
variable "undocumented" {
  type = string
}
output "bare" {
  value = var.untyped
}
output "typo" {
  description = "names a variable that is not there"
  value       = var.undocumentd
}
"""
        },
    )
    assert problems(root) == [
        "m: output bare has no description",
        "m: var.undocumentd is not declared here",
        "m: variable undocumented has no description",
        "m: variable untyped has no type",
    ]


def test_outputs_read_from_another_stack_must_exist_there(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "envs/platform/main.tf": 'output "cluster_name" {\n  description = "d"\n  value = "c"\n}\n',
            "envs/addons/main.tf": """
locals {
  platform = data.terraform_remote_state.platform.outputs
}
output "o" {
  description = "d"
  value = [
    local.platform.cluster_nmae,
    data.terraform_remote_state.platform.outputs.region,
    data.terraform_remote_state.nowhere.outputs.x,
  ]
}
""",
        },
    )
    assert problems(root) == [
        "envs/addons: remote state nowhere: no sibling stack directory nowhere",
        "envs/addons: remote state platform has no output cluster_nmae",
        "envs/addons: remote state platform has no output region",
    ]


def test_a_tfvars_example_sets_only_declared_variables(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {"s/main.tf": MODULE, "s/terraform.tfvars.example": 'name = "x"\nnmae = "y"\n'},
    )
    assert problems(root) == ["s: terraform.tfvars.example sets nmae, which is not a variable here"]


def test_escaped_interpolations_and_descriptions_are_not_references(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "m/main.tf": """
variable "v" {
  description = "mentions var.nothing and module.nobody.out in prose"
  type        = string
}
output "o" {
  description = "a literal: $${var.nothing}"
  value       = "$${var.nothing} and ${var.v}"
}
"""
        },
    )
    assert problems(root) == []
