"""Start the services of the topology as child processes, wait until each is ready, stop them all.

All of them start at once and are then waited for: no service needs another to be up to start
(each retries its broker, database and engine), and a stack that starts one by one spends most of
its time in imports and health polls that could overlap. They stop in three waves, each signalled
at once: the front doors (gateway, edge) first, so no new work comes in and live streams drain
while everything behind them still runs; then the processors and workers; the engines last, so a
worker's drain can finish its generations.

Used by `parley run` (in the foreground until Ctrl-C) and by the e2e tests.
Each child logs to ``<log_dir>/<name>.log``; a child that exits while starting
is reported with the tail of its log.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tools.topology import EDGE, ENGINE, GATEWAY, Service

#: Stopped first (no new traffic, live streams drain) and last (generations in a worker's drain finish).
_FRONT = (GATEWAY.name, EDGE.name)
_BACK = (ENGINE.name,)


class StartFailed(RuntimeError):
    pass


@dataclass
class Child:
    service: Service
    process: subprocess.Popen
    log: Path
    health_url: str | None
    metrics_url: str | None = None
    started: float = field(default_factory=time.monotonic)


class Supervisor:
    def __init__(self, log_dir: Path, env: dict[str, str] | None = None, ports: dict[str, int] | None = None) -> None:
        self.log_dir = log_dir
        self.env = {**os.environ, **(env or {})}
        self.ports = ports or {}
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self,
        service: Service,
        *,
        name: str | None = None,
        extra_env: dict[str, str] | None = None,
        ports: dict[str, int] | None = None,
    ) -> Child:
        """Start ``service`` (another instance of it: a new ``name``, its own ``extra_env`` and ``ports``)."""
        name = name or service.name
        url = service.health_url.format(**{**self.ports, **(ports or {})}) if service.health_url else None
        if url is not None and _answers(url):
            # Something else already serves there; its health answer would be taken for ours.
            raise StartFailed(f"{name}: {url} already answers: another process holds its port (change the PARLEY_*_PORT setting or stop it)")
        log = self.log_dir / f"{name}.log"
        env = {**self.env, **(extra_env or {})}
        # A port of its own for prometheus-client's server (parley.metrics.serve_from_env), never the parent's
        # one port, which every child would share.
        if "PARLEY_METRICS_PORT" not in (extra_env or {}):
            env["PARLEY_METRICS_PORT"] = str(free_port())
        metrics_url = f"http://127.0.0.1:{env['PARLEY_METRICS_PORT']}/metrics"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                service.argv(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us; we stop children in order
            )
        child = Child(service, process, log, url, metrics_url)
        # `parley ops drain NAME` finds the process by this file.
        pid_file(self.log_dir, name).write_text(f"{process.pid}\n")
        self.children.append(child)
        return child

    def wait_ready(self, child: Child, timeout: float = 180.0) -> float:
        """Seconds from its start until it can do its job: its health URL answers 200 (engine, gateway, edge), or
        its ``parley_ready`` gauge is 1 (processors, workers, document workers: parley/metrics.Readiness)."""
        began = child.started
        url = child.health_url or (f"{child.metrics_url}?name[]=parley_ready" if child.metrics_url else None)
        if url is None:
            raise StartFailed(f"{child.service.name} has neither a health URL nor a metrics port to ask")
        while True:
            code = child.process.poll()
            if code is not None:
                raise StartFailed(f"{child.service.name} exited with {code} while starting.\n{tail(child.log)}")
            elapsed = time.monotonic() - began
            if _ready(url, gauge=child.health_url is None):
                return elapsed
            if elapsed > timeout:
                raise StartFailed(f"{child.service.name} not ready after {timeout:.0f}s.\n{tail(child.log)}")
            time.sleep(0.2)

    def start_all(self, services: Iterable[Service], echo: Callable[[str], None] = print) -> None:
        for child in [self.start(service) for service in services]:
            seconds = self.wait_ready(child)
            echo(f"{child.service.name}: ready after {seconds:.1f}s (pid {child.process.pid}, log {child.log})")

    def stop(self, child: Child, timeout: float = 30.0) -> int | None:
        return _stop_together([child], timeout)[0]

    def stop_all(self, timeout: float = 30.0) -> None:
        front = [c for c in self.children if c.service.name in _FRONT]
        back = [c for c in self.children if c.service.name in _BACK]
        middle = [c for c in self.children if c not in front and c not in back]
        for wave in (front, middle, back):
            _stop_together(wave, timeout)
        self.children.clear()


def _stop_together(children: list[Child], timeout: float) -> list[int | None]:
    """SIGTERM every child at once, then wait for each (SIGKILL past ``timeout``); their exit codes."""
    for child in children:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait(5)
    return [child.process.returncode for child in children]


#: Listening ports are drawn below the kernel's ephemeral range: a port from there is also the local end of
#: any outgoing connection, so a server told to listen on it seconds later could find it taken (as a
#: private Cassandra did, under the load of two test workers). Random, so two processes rarely draw alike.
_PORTS = random.SystemRandom()
#: Ports handed out lately, by any process on this machine: a port drawn but not yet bound by the server it
#: was drawn for still looks free, so without this a second draw (in this process, or in another pytest
#: worker starting its own stack at the same moment) could hand it out again; the second server then fails
#: with "Address already in use" (a metrics port did, in a clean run under two workers).
RESERVED = Path(tempfile.gettempdir()) / "parley-ports"
#: How long a drawn port stays reserved: far longer than any server takes to bind it.
HOLD_S = 300.0


def free_port() -> int:
    """A port nothing listens on now, outside the ephemeral range, and not handed out in the last ``HOLD_S``."""
    low = _ephemeral_low()
    with _reservations() as held:
        for _ in range(1000):
            port = _PORTS.randrange(10_000, low)
            if port in held:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            held[port] = time.time()
            return port
    raise RuntimeError(f"no free port between 10000 and {low}")


@contextmanager
def _reservations() -> Iterator[dict[int, float]]:
    """port → when it was handed out, for the recent ones; held under an exclusive lock, written back after."""
    with open(RESERVED, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        now = time.time()
        held: dict[int, float] = {}
        for line in file.read().split():
            port, _, at = line.partition("@")
            try:
                if now - float(at) < HOLD_S:
                    held[int(port)] = float(at)
            except ValueError:
                continue  # a line another version wrote, or a torn one: not a reservation
        yield held
        file.seek(0)
        file.truncate()
        file.write("".join(f"{port}@{at}\n" for port, at in held.items()))


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768  # Linux's default
    return max(low, 11_000)


def free_ports(n: int) -> list[int]:
    """``n`` different free ports (a private Kafka and Cassandra need several at once)."""
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def pid_file(log_dir: Path, name: str) -> Path:
    return log_dir / f"{name}.pid"


def _ready(url: str, gauge: bool) -> bool:
    try:
        response = httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    return not gauge or any(line.split() == ["parley_ready", "1.0"] for line in response.text.splitlines())


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return False
    return True


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return "(no log)"
    return f"--- last lines of {path} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
