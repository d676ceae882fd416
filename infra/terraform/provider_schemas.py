"""Check every resource and data block of infra/terraform against its provider's schema, without the provider.

`terraform validate` needs the providers, which cannot be downloaded where Parley is built. Their schemas can:
CDK for Terraform's prebuilt bindings (PyPI wheels) carry each provider's schema as a jsii assembly, one
struct per block with one property per argument, each linked to its registry anchor (the HCL name). This
reads those structs and reports, per block: arguments the provider does not have, and required arguments
left out. Expressions are not evaluated (that is `terraform console`'s, in the tests).

Run by tests/integration/test_terraform_tools.py and by ``infra/terraform/check.sh schemas``; the wheels
are downloaded once (~80 MB) into .tools/provider-schemas. Loading them takes ~5 s and ~650 MB.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import hcl2

#: The bindings of the provider versions versions.tf pins (the last ones CDKTF published).
WHEELS = (
    "cdktf-cdktf-provider-aws==21.22.1",  # hashicorp/aws 6.25.0
    "cdktf-cdktf-provider-helm==12.1.2",  # hashicorp/helm 3.1.1
    "cdktf-cdktf-provider-kubernetes==12.1.1",  # hashicorp/kubernetes 2.38.0
    "cdktf-cdktf-provider-random==12.0.1",  # hashicorp/random 3.7.2
    "cdktf-cdktf-provider-tls==11.0.1",  # hashicorp/tls 4.1.0
)

#: Arguments of every block that are Terraform's, and keys python-hcl2 adds.
META = frozenset({"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"})
PARSER_KEYS = frozenset({"__is_block__", "__comments__", "__inline_comments__", "__start_line__", "__end_line__"})
#: Built into Terraform, so in no provider's bindings.
BUILTIN = frozenset({("data", "terraform_remote_state")})

CLASS_DOC = re.compile(r"registry\.terraform\.io/providers/hashicorp/(\w+)/[\d.]+/docs/(resources|data-sources)/(\w+) ")
ARGUMENT_DOC = re.compile(r"docs/(?:resources|data-sources)/\w+#(\w+)\b")


@dataclass(frozen=True)
class Schemas:
    types: dict[str, dict]  # jsii fqn -> type
    blocks: dict[tuple[str, str], str]  # ("resource" | "data", "aws_s3_bucket") -> fqn of its config struct

    def arguments(self, fqn: str) -> dict[str, dict]:
        """HCL name -> jsii property of a config struct, its interfaces' included."""
        found: dict[str, dict] = {}
        struct = self.types[fqn]
        for parent in struct.get("interfaces", []):
            if parent in self.types:
                found.update(self.arguments(parent))
        for prop in struct.get("properties", []):
            anchor = ARGUMENT_DOC.search(prop.get("docs", {}).get("remarks", ""))
            found[anchor.group(1) if anchor else re.sub(r"([A-Z])", r"_\1", prop["name"]).lower()] = prop
        return found

    def nested(self, typ: dict) -> str | None:
        """The struct of a nested block (or list of blocks, or object) in a property's type, if it is one."""
        if "fqn" in typ:
            struct = self.types.get(typ["fqn"], {})
            return typ["fqn"] if struct.get("kind") == "interface" and struct.get("datatype") else None
        if "collection" in typ:
            collection = typ["collection"]
            return self.nested(collection.get("elementtype") or collection.get("elementType") or {})
        for member in typ.get("union", {}).get("types", []):
            if found := self.nested(member):
                return found
        return None


def load(assemblies: list[Path]) -> Schemas:
    types: dict[str, dict] = {}
    blocks: dict[tuple[str, str], str] = {}
    for path in assemblies:
        for fqn, typ in json.loads(path.read_text())["types"].items():
            types[fqn] = typ
            described = CLASS_DOC.search(typ.get("docs", {}).get("summary", "") + " ")
            params = typ.get("initializer", {}).get("parameters", [])
            config = [p for p in params if p["name"] == "config"]
            if typ.get("kind") == "class" and described and config:
                provider, kind, name = described.groups()
                key = ("resource" if kind == "resources" else "data", f"{provider}_{name}")
                blocks[key] = config[0]["type"]["fqn"]
    return Schemas(types, blocks)


def unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def block_problems(schemas: Schemas, body: dict, fqn: str, where: str, top: bool = True) -> list[str]:
    known = schemas.arguments(fqn)
    given: set[str] = set()
    found: list[str] = []
    for key, value in body.items():
        if key in PARSER_KEYS or (top and key in META):
            continue
        if key == "dynamic":  # dynamic "name" { for_each = …, content { … } }
            for block in value:
                for name, spec in block.items():
                    name = unquote(name)
                    given.add(name)
                    if name not in known:
                        found.append(f"{where}: no block {name}")
                    elif (struct := schemas.nested(known[name]["type"])) and "content" in spec:
                        content = spec["content"][0] if isinstance(spec["content"], list) else spec["content"]
                        found += block_problems(schemas, content, struct, f"{where}.{name}", top=False)
            continue
        given.add(key)
        if key not in known:
            found.append(f"{where}: no argument {key}")
            continue
        if struct := schemas.nested(known[key]["type"]):
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    found += block_problems(schemas, item, struct, f"{where}.{key}", top=False)
    required = [name for name, prop in known.items() if not prop.get("optional")]
    return found + [f"{where}: missing required {name}" for name in required if name not in given]


def problems(schemas: Schemas, root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.tf")):
        with path.open() as f:
            document = hcl2.load(f)
        for kind in ("resource", "data"):
            for block in document.get(kind, []):
                for typ, named in block.items():
                    for name, body in named.items():
                        key = (kind, unquote(typ))
                        address = f"{'data.' if kind == 'data' else ''}{key[1]}.{unquote(name)}"
                        where = f"{path.relative_to(root)}: {address}"
                        if key in BUILTIN:
                            continue
                        if key not in schemas.blocks:
                            found.append(f"{where}: no provider schema for {key[1]}")
                            continue
                        found += block_problems(schemas, body, schemas.blocks[key], where)
    return found


def assemblies(wheels: Path) -> list[Path]:
    """The .jsii assembly inside each wheel of WHEELS, downloaded and extracted once into ``wheels``."""
    wheels.mkdir(parents=True, exist_ok=True)
    have = {w.name.split("-")[0].replace("_", "-") + "==" + w.name.split("-")[1] for w in wheels.glob("*.whl")}
    missing = [w for w in WHEELS if w not in have]
    if missing:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(wheels)]
        subprocess.run([*pip, *missing], check=True)
    found = []
    for wheel in sorted(wheels.glob("*.whl")):
        target = wheel.with_suffix(".jsii")
        if not target.exists():
            with zipfile.ZipFile(wheel) as z:
                tgz = next(n for n in z.namelist() if n.endswith(".jsii.tgz"))
                with z.open(tgz) as packed, tarfile.open(fileobj=packed, mode="r:gz") as tar:
                    member = tar.extractfile("package/.jsii")
                    assert member is not None, f"{wheel.name} has no package/.jsii"
                    target.write_bytes(member.read())
        found.append(target)
    return found


def main(argv: list[str]) -> int:
    """``fetch WHEELS_DIR``: download and extract the schemas; ``check TF_DIR WHEELS_DIR``: check a tree."""
    if argv[:1] == ["fetch"] and len(argv) == 2:
        assemblies(Path(argv[1]))
        return 0
    if argv[:1] != ["check"] or len(argv) != 3:
        print("usage: provider_schemas.py fetch WHEELS_DIR | check TF_DIR WHEELS_DIR", file=sys.stderr)
        return 2
    root, wheels = Path(argv[1]), Path(argv[2])
    found = problems(load(assemblies(wheels)), root)
    print("\n".join(found) if found else f"every resource and data block of {root} fits its provider's schema")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
