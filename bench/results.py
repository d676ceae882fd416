"""A benchmark's figures as a file the capacity planner reads: ``bench/results/<name>.json``.

The format is ``tools.capacity.measured.Result``: the date, the host's cores, the git commit, the
command, the figures and the baseline measured beside them in the same run. A run replaces the
file of its name; the committed files are the runs docs/capacity.md quotes.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from parley.settings import REPO_ROOT
from tools.capacity.measured import RESULTS_DIR, Result, path_of


def git_commit() -> str:
    """HEAD, with ``-dirty`` when the work tree has changes; ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.strip() + ("-dirty" if dirty.strip() else "")


def this_command() -> str:
    """How this process was started, as ``python -m bench.<name> …`` (``make bench`` sets argv[0] to ``bench.<name>``)."""
    first = sys.argv[0] if sys.argv else ""
    module = f"bench.{Path(first).stem}" if first.endswith(".py") else first or "bench"
    return shlex.join(["python", "-m", module, *sys.argv[1:]])


def record(
    name: str, figures: dict[str, float], *, baseline: dict[str, float] | None, command: str,
    results_dir: Path = RESULTS_DIR,
) -> Path:
    """Write ``<results_dir>/<name>.json`` and say where."""
    result = Result(
        name=name,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        host_cores=os.cpu_count() or 0,
        git_commit=git_commit(),
        command=command,
        figures={k: float(v) for k, v in figures.items()},
        baseline=None if baseline is None else {k: float(v) for k, v in baseline.items()},
    )
    path = path_of(name, results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json())
    print(f"figures written to {path}", flush=True)
    return path
