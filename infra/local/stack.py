"""Start, stop and report the local Kafka + Cassandra (``parley infra up|down|status``).

``up`` is idempotent: services already running (by our pid file) are reused;
a port held by a stranger is a clear error. Both JVMs start at once and are
awaited together, which roughly halves a cold start on two cores. With
``PARLEY_INFRA_SECURE=1`` both ask for a login over TLS (infra/local/secure.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.local import cassandra, jvm, kafka
from infra.local.settings import LocalInfraSettings

Echo = Callable[[str], None]


@dataclass
class ServiceState:
    name: str
    address: str
    pid: int | None
    reused: bool = False
    seconds_to_healthy: float | None = None
    rss_mib: float | None = None
    log: Path | None = None


_MODULES = {"kafka": kafka, "cassandra": cassandra}


def _address(name: str, cfg: LocalInfraSettings) -> str:
    return f"127.0.0.1:{cfg.kafka_port if name == 'kafka' else cfg.cassandra_port}"


def up(cfg: LocalInfraSettings, echo: Echo = jvm.echo_stderr, only: tuple[str, ...] = ("kafka", "cassandra")) -> list[ServiceState]:
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    states: dict[str, ServiceState] = {}
    started: dict[str, tuple[jvm.JvmService, float]] = {}
    for name in only:
        mod = _MODULES[name]
        svc = mod.service(cfg)
        pid = jvm.pid_of(svc)
        states[name] = ServiceState(name, _address(name, cfg), pid, log=mod.log_file(cfg))
        if pid is not None:
            states[name].reused = True
            echo(f"{name}: already running (pid {pid}), reusing it")
            started[name] = (svc, time.monotonic())
            continue
        lib = jvm.fetch_classpath(mod.POM, cfg.cache_dir, mod.tag(), echo)
        svc = mod.prepare(cfg, lib)
        echo(f"{name}: starting {mod.tag()} on {_address(name, cfg)}")
        states[name].pid = jvm.start(svc, lib)
        started[name] = (svc, time.monotonic())

    driver_log = logging.getLogger("cassandra")
    level = driver_log.level
    driver_log.setLevel(logging.CRITICAL)  # refused connections while it boots are expected
    try:
        for name, (svc, began) in started.items():
            mod = _MODULES[name]
            jvm.wait_healthy(svc, lambda m=mod: m.healthy(cfg), cfg.start_timeout_s, echo, mod.log_file(cfg))
            if name == "cassandra" and cfg.secure:
                cassandra.ensure_role(cfg)
            state = states[name]
            state.seconds_to_healthy = time.monotonic() - began
            state.rss_mib = jvm.rss_mib(state.pid) if state.pid else None
            echo(f"{name}: healthy at {state.address} after {state.seconds_to_healthy:.1f}s")
    finally:
        driver_log.setLevel(level)
    return list(states.values())


def down(cfg: LocalInfraSettings, echo: Echo = jvm.echo_stderr) -> None:
    for name, mod in _MODULES.items():
        if jvm.stop(mod.service(cfg)):
            echo(f"{name}: stopped")
        else:
            echo(f"{name}: not running (nothing Parley started)")


def status(cfg: LocalInfraSettings) -> list[ServiceState]:
    out = []
    for name, mod in _MODULES.items():
        pid = jvm.pid_of(mod.service(cfg))
        out.append(
            ServiceState(name, _address(name, cfg), pid, rss_mib=jvm.rss_mib(pid) if pid else None, log=mod.log_file(cfg))
        )
    return out
