"""Start the services of the topology as child processes, wait until each is ready, stop them all.

Used by `parley run` (in the foreground until Ctrl-C) and by the e2e tests.
Each child logs to ``<log_dir>/<name>.log``; a child that exits while starting
is reported with the tail of its log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from tools.topology import Service


class StartFailed(RuntimeError):
    pass


@dataclass
class Child:
    service: Service
    process: subprocess.Popen
    log: Path
    health_url: str | None
    metrics_url: str | None = None


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
        if service.own_metrics:
            metrics_url = url.rsplit("/", 1)[0] + "/metrics" if url else None
        else:  # a port of its own for prometheus-client's server (parley.metrics.serve_from_env)
            env.setdefault("PARLEY_METRICS_PORT", str(free_port()))
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

    def wait_ready(self, child: Child, timeout: float = 120.0, settle: float = 1.5) -> float:
        """Seconds until ready: its health URL answers 200, or (no URL) it stayed up for ``settle`` s."""
        began = time.monotonic()
        while True:
            code = child.process.poll()
            if code is not None:
                raise StartFailed(f"{child.service.name} exited with {code} while starting.\n{tail(child.log)}")
            elapsed = time.monotonic() - began
            if child.health_url is None:
                if elapsed >= settle:
                    return elapsed
            else:
                try:
                    if httpx.get(child.health_url, timeout=1).status_code == 200:
                        return elapsed
                except httpx.HTTPError:
                    pass
            if elapsed > timeout:
                raise StartFailed(f"{child.service.name} not ready after {timeout:.0f}s.\n{tail(child.log)}")
            time.sleep(0.2)

    def start_all(self, services: Iterable[Service], echo: Callable[[str], None] = print) -> None:
        for service in services:
            child = self.start(service)
            seconds = self.wait_ready(child)
            echo(f"{service.name}: ready after {seconds:.1f}s (pid {child.process.pid}, log {child.log})")

    def stop(self, child: Child, timeout: float = 30.0) -> int | None:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
            try:
                child.process.wait(timeout)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait(5)
        return child.process.returncode

    def stop_all(self, timeout: float = 30.0) -> None:
        for child in reversed(self.children):  # the gateway first: stop taking traffic, then the rest
            self.stop(child, timeout)
        self.children.clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` different free ports (a private Kafka and Cassandra need several at once)."""
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def pid_file(log_dir: Path, name: str) -> Path:
    return log_dir / f"{name}.pid"


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
