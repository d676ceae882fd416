"""Layers only point down: no package imports one ranked above it (docs/design.md §2).

The sources are parsed, not imported, so an import inside a function counts as
much as one at the top of a module: it runs up the same way when it runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Bottom up; a package may import its own rank and any rank below it.
RANKS = {
    "schemas": 0,  # the contracts (events, codec, topic catalog, CQL) that every other layer speaks
    "parley": 1,  # the shared shell: settings, Kafka and Cassandra clients, ids, logging, metrics
    "infra": 2,  # runs Kafka and Cassandra locally, its settings read with parley's helpers
    "documents": 3,  # files → searchable pages: the gateway stores and checks, the context builder retrieves, workers cite
    "workers": 4,  # below streams: the context builder reuses the engine client and chat template for summaries
    "moderation": 5,  # classifiers and policy: a safety model is called through the workers' engine client
    "streams": 6,  # below gateway: the gateway applies the streams' pure folds (usage, the conversation tree)
    "gateway": 7,  # the HTTP API, the last of the services
    "edge": 8,  # writes HAProxy's configuration: the topic catalog, the gateway's and documents' body limits
    "tools": 9,  # the CLI, ops, audit, analysts, supervisor and isolated stacks start and read every service
    "bench": 10,  # benchmarks start whole stacks through tools; nothing imports them
}


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import of one of ours in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, top) for top in {n.split(".")[0] for n in names} if top in RANKS]
    return found


def test_every_package_imports_only_its_own_layer_and_those_below() -> None:
    upward = []
    for package, rank in RANKS.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, imported in imported_packages(path):
                if RANKS[imported] > rank:
                    upward.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_imports_inside_functions_count_and_relative_ones_do_not(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import os\nimport parley.ids, tools.cli as c\n\n\ndef f():\n"
        "    from streams import tree\n    from . import gateway\n    from .tools import x\n"
    )
    assert sorted(imported_packages(source)) == [(2, "parley"), (2, "tools"), (6, "streams")]


def test_the_gateway_and_the_cores_it_reads_load_no_faust() -> None:
    """The gateway reads the router's policy and the streams' folds; none of them may pull in faust."""
    import subprocess
    import sys

    probe = "import sys, gateway.app, streams.router, tools.analysts.turns; print(sorted(m for m in sys.modules if m.split('.')[0] in ('faust', 'aiokafka', 'mode')))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


#: Clients of the broker and the store, and the stream framework: only the shells may load them.
IO_CLIENTS = {"faust", "mode", "aiokafka", "confluent_kafka", "cassandra"}

#: The modules of streams/ and workers/ that touch Kafka or Cassandra; every other one is a core.
SHELLS = {
    "streams.__main__", "streams.app", "streams.processors", "streams.readers", "streams.route_recall",
    "streams.route_backlog",
    "streams.store", "streams.summary_store", "streams.erasure_rows", "streams.tool_store", "streams.tool_executor",
    "streams.search_index",
    "workers.__main__", "workers.worker", "workers.intake", "workers.control", "workers.sink",
    "workers.transactions", "workers.history_reader", "workers.tool_executor",
    "documents.index", "documents.worker", "documents.__main__",
}  # fmt: skip


def _module_imports(path: Path) -> set[str]:
    """Modules ``path`` imports at any depth, leaving out ``if TYPE_CHECKING:`` blocks (never run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _ours(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def io_clients_reached(module: str) -> dict[str, str]:
    """Each I/O client ``module`` loads, through any chain of our modules, with the module that imports it."""
    seen: set[str] = set()
    found: dict[str, str] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _ours(name)
        if path is None or name in seen:
            continue
        seen.add(name)
        for imported in _module_imports(path):
            top = imported.split(".")[0]
            if top in IO_CLIENTS:
                found.setdefault(top, name)
            elif top in RANKS:
                todo.append(imported)
    return found


def test_no_core_loads_faust_kafka_or_cassandra_clients() -> None:
    """Cores are state and ``handle(event) -> effects``; their I/O is handed to them by a shell."""
    cores = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for package in ("streams", "workers", "documents", "moderation")
        for path in sorted((ROOT / package).glob("*.py"))
    ]
    impure = {m: io_clients_reached(m) for m in cores if m not in SHELLS}
    assert not {m: found for m, found in impure.items() if found}
    assert all(_ours(m) for m in SHELLS), "a shell listed here no longer exists"


def test_the_purity_check_follows_chains_and_skips_type_checking_blocks() -> None:
    assert io_clients_reached("streams.summary_store") == {"cassandra": "streams.store"}
    assert "cassandra" not in io_clients_reached("streams.materializer")


def test_the_edge_loads_no_kafka_or_cassandra_client() -> None:
    """It writes HAProxy's configuration from settings alone, so it needs neither."""
    for module in ("edge.__main__", "edge.config"):
        assert io_clients_reached(module) == {}, module
