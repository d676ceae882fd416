"""Where the suite's time goes: ``make test`` phase by phase, then pytest's own durations grouped by module.

    python -m tools.suite_times run  [--log F]   # from a checkout: each phase of `make test`, timed; writes F
    python -m tools.suite_times read F           # the table of a log that pytest wrote with --durations=0

``run`` does what ``make test`` does, one step at a time (install, Kafka and Cassandra, topics and
schema, the deployment tools, pytest with ``--durations=0``), and prints the seconds of each step and
then the pytest breakdown: per test directory and per module, the seconds spent in fixture setup (mostly
stacks starting), in the tests themselves and in teardown (stacks stopping). ``read`` prints the same
breakdown from any pytest output that has the ``slowest durations`` section, e.g. CI's:
``PYTEST_ADDOPTS=--durations=0 bash .ci/run > log``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

#: One line of pytest's --durations report: "12.34s setup    tests/e2e/test_x.py::test_y[param]".
DURATION = re.compile(r"^\s*(?P<s>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<id>\S.*?)\s*$")
SUMMARY = re.compile(r"^=+ (?P<text>.*\b(?:passed|failed|error)\b.*) in (?P<s>[\d.]+)s")

#: The steps of `make test` (Makefile), in order: run one at a time so each gets its own time.
STEPS: tuple[tuple[str, list[str]], ...] = (
    ("install (venv, packages, Debian)", ["make", "install"]),
    ("Kafka + Cassandra up, topics, schema", ["make", "setup"]),
    ("kubeconform", ["bash", "tools/fleet/install_kubeconform.sh"]),
    ("terraform tools", ["bash", "infra/terraform/check.sh", "install"]),
)


@dataclass
class Module:
    setup: float = 0.0
    call: float = 0.0
    teardown: float = 0.0
    tests: set[str] = field(default_factory=set)

    @property
    def total(self) -> float:
        return self.setup + self.call + self.teardown


def parse(lines: list[str]) -> tuple[dict[str, Module], str]:
    """Per module (path without the test name): its seconds by phase; and pytest's closing line."""
    modules: dict[str, Module] = defaultdict(Module)
    closing = ""
    for line in lines:
        if m := DURATION.match(line):
            path, _, name = m["id"].partition("::")
            module = modules[path]
            setattr(module, m["phase"], getattr(module, m["phase"]) + float(m["s"]))
            module.tests.add(name)
        elif m := SUMMARY.match(line):
            closing = f"{m['text']} in {float(m['s']):.0f} s"
    return dict(modules), closing


def directory(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def table(modules: dict[str, Module], top: int = 40) -> str:
    out = [f"{'':52} {'setup':>8} {'tests':>8} {'teardown':>9} {'total':>8} {'n':>5}"]

    def row(name: str, m: Module, n: int) -> str:
        return f"{name[-52:]:52} {m.setup:8.1f} {m.call:8.1f} {m.teardown:9.1f} {m.total:8.1f} {n:5d}"

    dirs: dict[str, Module] = defaultdict(Module)
    counts: dict[str, int] = defaultdict(int)
    for path, m in modules.items():
        d = dirs[directory(path)]
        d.setup, d.call, d.teardown = d.setup + m.setup, d.call + m.call, d.teardown + m.teardown
        counts[directory(path)] += len(m.tests)
    out.append("by directory:")
    for name, m in sorted(dirs.items(), key=lambda kv: -kv[1].total):
        out.append(row(name, m, counts[name]))
    whole = Module(sum(m.setup for m in dirs.values()), sum(m.call for m in dirs.values()), sum(m.teardown for m in dirs.values()))
    out.append(row("all", whole, sum(counts.values())))
    out.append(f"by module (the {top} slowest):")
    for name, m in sorted(modules.items(), key=lambda kv: -kv[1].total)[:top]:
        out.append(row(name, m, len(m.tests)))
    return "\n".join(out)


def run(log: Path) -> int:
    timings: list[tuple[str, float]] = []
    for label, argv in STEPS:
        began = time.monotonic()
        if subprocess.run(argv).returncode:
            print(f"{label}: failed", file=sys.stderr)
            return 1
        timings.append((label, time.monotonic() - began))
    began = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen([".venv/bin/python", "-m", "pytest", "-q", "--durations=0"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
        code = proc.wait()
    timings.append(("pytest", time.monotonic() - began))
    print("\nmake test, step by step:")
    for label, seconds in timings:
        print(f"  {label:40} {seconds:8.1f} s")
    print(f"  {'all':40} {sum(s for _, s in timings):8.1f} s\n")
    modules, closing = parse(log.read_text().splitlines())
    print(table(modules))
    print(closing)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="every step of make test, timed, then the pytest breakdown")
    r.add_argument("--log", type=Path, default=Path(".data/suite-times.log"))
    p = sub.add_parser("read", help="the breakdown of a pytest log written with --durations=0")
    p.add_argument("log", type=Path)
    p.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    if args.command == "run":
        args.log.parent.mkdir(parents=True, exist_ok=True)
        return run(args.log)
    modules, closing = parse(args.log.read_text(errors="replace").splitlines())
    print(table(modules, args.top))
    print(closing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
