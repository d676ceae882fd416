"""Where each process of a stack spends its CPU: py-spy (MIT, the sampling profiler; installed by `make
bench-tools` into .venv-bench) attached to every Parley process for one benchmark step.

Samples are taken only of the thread holding the GIL (``--gil``: a thread waiting in librdkafka's or the
Cassandra driver's C code, or in the event loop's ``epoll``, has released it), without pausing the process
(``--nonblocking``), so a process's samples are its Python CPU and the shares below are shares of it. Each sample
is charged twice: to the innermost frame of Parley's own code (which of our functions the time is spent
under, libraries included) and to the library of its leaf frame (what actually ran: aiokafka's decoding,
cryptography, asyncio's loop). The raw stacks stay in the output directory for a flame graph
(``py-spy``'s raw format is the collapsed-stack format flamegraph.pl and speedscope read).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

#: Our packages: a frame in one of them is Parley's own code.
OURS = ("parley", "streams", "workers", "gateway", "moderation", "documents", "schemas", "engine", "tools")
RATE = 25  # samples per second: little overhead across a dozen processes, enough for shares over a 30 s step
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """The py-spy of .venv-bench (``make bench-tools``), else one on the PATH."""
    local = Path(".venv-bench/bin/py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


@contextmanager
def sampling(pids: Mapping[str, int], out: Path) -> Iterator[dict[str, Path]]:
    """py-spy on each process while the block runs; yields name → its raw stacks' file (written at the end)."""
    binary = py_spy()
    if binary is None:
        raise SystemExit("--profile needs py-spy: `make bench-tools` installs it into .venv-bench")
    out.mkdir(parents=True, exist_ok=True)
    files = {name: out / f"{re.sub(r'[^A-Za-z0-9_-]', '_', name)}.txt" for name in pids}
    running = [
        subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--gil", "--nonblocking", "--rate", str(RATE),
             "--output", str(files[name])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]  # fmt: skip
    try:
        yield files
    finally:
        for proc in running:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        for proc in running:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _frame(text: str) -> tuple[str, str]:
    """(function, file) of one frame of py-spy's raw output."""
    match = _FRAME.match(text)
    return (match["function"], match["file"]) if match else (text, "")


def _top(file: str) -> str:
    """The package (or stdlib module) of a frame's file: py-spy names files from their import root
    (``aiokafka/consumer/fetcher.py``, ``selectors.py``), or in full under ``site-packages``."""
    parts = Path(file).parts
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    return parts[0].removesuffix(".py") if parts else "?"


def _ours(file: str) -> bool:
    return "site-packages" not in file and _top(file) in OURS


def shares(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, by our innermost function, by the leaf's library) of py-spy's raw (collapsed) stacks."""
    own: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        frames = [f for f in frames if f[1]]  # the thread's name, py-spy's first entry, has no file
        total += n
        mine = next((f for f in reversed(frames) if _ours(f[1])), None)
        own[f"{mine[0]} ({_short(mine[1])})" if mine else "(no Parley frame)"] += n
        leaf[_top(frames[-1][1]) if frames else "?"] += n
    return total, own, leaf


def _short(file: str) -> str:
    parts = Path(file).parts
    start = next((i for i, p in enumerate(parts) if p in OURS), 0)
    return "/".join(parts[start:])


def report(files: Mapping[str, Path], top: int = 5) -> None:
    for name, path in files.items():
        if not path.exists():
            print(f"        {name}: no samples (py-spy could not attach, or the process was idle)")
            continue
        total, own, leaf = shares(path.read_text())
        if not total:
            continue
        fmt = lambda c: ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in c.most_common(top))  # noqa: E731
        print(f"        {name} ({total} samples at {RATE}/s): ours: {fmt(own)}")
        print(f"        {' ' * len(name)}   leaf: {fmt(leaf)}")
