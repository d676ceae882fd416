"""Parley's measured figures: the files ``bench/results/<name>.json`` the benchmarks write (bench/results.py).

One file per benchmark run, the last one kept: when it ran, on how many cores, at which commit, the
command, its figures and the baseline measured beside them. The planner takes the figures it needs
from them (``SOURCES``); a missing or unreadable file leaves its figures unmeasured and says which
benchmark to run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from parley.settings import REPO_ROOT
from tools.capacity.model import Measured

RESULTS_DIR = REPO_ROOT / "bench" / "results"


@dataclass(frozen=True)
class Result:
    """One ``bench/results/<name>.json``."""

    name: str  # the benchmark: bench/<name>.py
    date: str  # when it ran, ISO 8601 UTC
    host_cores: int  # os.cpu_count() of the machine it ran on
    git_commit: str  # HEAD, "-dirty" when the tree had changes
    command: str  # how it was run
    figures: dict[str, float]
    baseline: dict[str, float] | None  # measured in the same run, to compare the figures with

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Result:
        raw = json.loads(text)
        missing = [f.name for f in fields(cls) if f.name not in raw]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        result = cls(**{f.name: raw[f.name] for f in fields(cls)})
        if not all(isinstance(v, (int, float)) for v in result.figures.values()):
            raise ValueError("a figure that is not a number")
        return result


def path_of(name: str, results_dir: Path = RESULTS_DIR) -> Path:
    return results_dir / f"{name}.json"


@dataclass(frozen=True)
class Source:
    """Where one of ``Measured``'s figures comes from."""

    field: str  # Measured's field
    bench: str  # the results file and benchmark module
    figure: str  # the key in its figures
    meaning: str  # the figure in words, with its unit


SOURCES: tuple[Source, ...] = (
    Source("streams_per_gateway", "fanout", "streams_per_gateway", "SSE streams per gateway process within its lag bar"),
    Source("materializer_events_per_s", "processors", "materializer_events_per_s", "chat.events per second, one materializer"),
    Source("context_events_per_s", "processors", "context_events_per_s", "chat.events per second, one context builder"),
    Source("node_writes_per_s", "replay", "rebuild_writes_per_s", "Cassandra writes per second, one node (the rebuild)"),
    Source("projection_writes_per_message", "replay", "projection_writes_per_message", "projection writes per posted message"),
    Source("write_through_writes_per_message", "replay", "write_through_writes_per_message",
           "gateway write-through writes per posted message"),
    Source("disk_bytes_per_message", "storage", "disk_bytes_per_message", "bytes on disk per posted message, fixed part"),
    Source("disk_bytes_per_reply_token", "storage", "disk_bytes_per_reply_token", "bytes on disk per reply token"),
)


@dataclass(frozen=True)
class Readings:
    measured: Measured
    results: dict[str, Result]  # by benchmark name: the files read
    problems: dict[str, str]  # by benchmark name: why its figures are missing, and what to run


def read(results_dir: Path = RESULTS_DIR) -> Readings:
    """The figures of every file ``SOURCES`` names that can be read."""
    results: dict[str, Result] = {}
    problems: dict[str, str] = {}
    for bench in dict.fromkeys(s.bench for s in SOURCES):
        path = path_of(bench, results_dir)
        run = f"run `python -m bench.{bench}` with Kafka and Cassandra up (it writes {path})"
        try:
            results[bench] = Result.from_json(path.read_text())
        except FileNotFoundError:
            problems[bench] = f"not measured yet: {run}"
        except (OSError, ValueError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
            problems[bench] = f"{path} cannot be read ({exc}): {run}"
    measured = Measured()
    for s in SOURCES:
        result = results.get(s.bench)
        if result is None:
            continue
        if s.figure not in result.figures:
            problems[s.bench] = f"{path_of(s.bench, results_dir)} has no {s.figure}: run `python -m bench.{s.bench}` again"
            continue
        measured = replace(measured, **{s.field: float(result.figures[s.figure])})
    return Readings(measured, results, problems)
