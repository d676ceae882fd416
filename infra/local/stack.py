"""Start, stop and report the local Kafka + Cassandra (``parley infra up|down|status``).

``up`` is idempotent: services already running (by our pid file) are reused;
a port held by a stranger is a clear error. Every node starts at once and all
are awaited together, which roughly halves a cold start on two cores. With
``PARLEY_INFRA_SECURE=1`` both ask for a login over TLS (infra/local/secure.py).

With ``PARLEY_INFRA_REPLICAS=3`` (``parley infra up --replicas 3``) it is a
replicated cluster instead, under ``PARLEY_DATA_DIR/replicated``: three brokers
whose controllers form the quorum, and three Cassandra nodes. Cassandra's rule of
one node at a time is for nodes that bootstrap (stream a token range from the
others); these never do (``infra.local.cassandra``), so they start together too:
a cold 3 + 3 start took 69 s this way on two busy cores, 160 s one node after
another. ``infra.local.faults`` kills, pauses and restarts one node of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from infra.local import cassandra, jvm, kafka
from infra.local.settings import LocalInfraSettings

Echo = Callable[[str], None]


@dataclass
class ServiceState:
    name: str  # kafka | cassandra, or kafka-<i> | cassandra-<i> in a replicated cluster
    address: str
    pid: int | None
    reused: bool = False
    seconds_to_healthy: float | None = None
    rss_mib: float | None = None
    log: Path | None = None


_MODULES = {"kafka": kafka, "cassandra": cassandra}


def _address(name: str, cfg: LocalInfraSettings, index: int = 0) -> str:
    return f"{cfg.hosts[index]}:{cfg.kafka_port if name == 'kafka' else cfg.cassandra_port}"


def up(
    cfg: LocalInfraSettings,
    echo: Echo = jvm.echo_stderr,
    only: tuple[str, ...] = ("kafka", "cassandra"),
    nodes: tuple[int, ...] | None = None,
) -> list[ServiceState]:
    """The services ``only`` running and healthy, each of their ``nodes`` (None: all), started where none
    of ours runs."""
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    wanted = [(name, index) for name in only for index in (range(cfg.replicas) if nodes is None else nodes)]
    for name in {name for name, index in wanted if jvm.pid_of(_MODULES[name].service(cfg, index)) is None}:
        mod = _MODULES[name]
        jvm.fetch_classpath(mod.POM, cfg.cache_dir, mod.tag(), echo)  # once, before the threads below use it
    states: list[ServiceState] = []
    awaited: list[tuple[str, int, jvm.JvmService, float]] = []
    driver_log = logging.getLogger("cassandra")
    level = driver_log.level
    driver_log.setLevel(logging.CRITICAL)  # refused connections while it boots are expected
    try:
        # Each node's preparation runs a JVM of its own (Kafka formats its storage): all at once.
        with ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
            for (name, index), (svc, state, began) in zip(wanted, pool.map(lambda w: _launch(cfg, *w, echo), wanted)):
                states.append(state)
                awaited.append((name, index, svc, began))
        _await(cfg, awaited, states, echo)
    finally:
        driver_log.setLevel(level)
    return states


def _launch(cfg: LocalInfraSettings, name: str, index: int, echo: Echo) -> tuple[jvm.JvmService, ServiceState, float]:
    """Node ``index`` of ``name``: ours already running, or started now (not yet awaited); and since when."""
    mod = _MODULES[name]
    svc = mod.service(cfg, index)
    pid = jvm.pid_of(svc)
    state = ServiceState(svc.name, _address(name, cfg, index), pid, log=mod.log_file(cfg, index))
    if pid is not None:
        state.reused = True
        echo(f"{svc.name}: already running (pid {pid}), reusing it")
        return svc, state, time.monotonic()
    lib = jvm.fetch_classpath(mod.POM, cfg.cache_dir, mod.tag(), echo)
    svc = mod.prepare(cfg, lib, index)
    echo(f"{svc.name}: starting {mod.tag()} on {state.address}")
    state.pid = jvm.start(svc, lib)
    return svc, state, time.monotonic()


def _await(
    cfg: LocalInfraSettings, nodes: list[tuple[str, int, jvm.JvmService, float]], states: list[ServiceState], echo: Echo
) -> None:
    by_name = {s.name: s for s in states}
    for name, index, svc, began in nodes:
        mod = _MODULES[name]
        jvm.wait_healthy(svc, lambda m=mod, i=index: m.healthy(cfg, i), cfg.start_timeout_s, echo, mod.log_file(cfg, index))
        if name == "cassandra" and cfg.secure:
            cassandra.ensure_role(cfg)
        state = by_name[svc.name]
        state.seconds_to_healthy = time.monotonic() - began
        state.rss_mib = jvm.rss_mib(state.pid) if state.pid else None
        echo(f"{svc.name}: healthy at {state.address} after {state.seconds_to_healthy:.1f}s")


def down(cfg: LocalInfraSettings, echo: Echo = jvm.echo_stderr) -> None:
    """Stop every service Parley started under ``cfg.data_dir``: the single node's, and a replicated
    cluster's. All at once: a broker left without its controllers' quorum would wait 30 s for it."""
    services = [
        (node_cfg, mod.service(node_cfg, index))
        for node_cfg in _layouts(cfg)
        for mod in _MODULES.values()
        for index in range(node_cfg.replicas)
    ]
    with ThreadPoolExecutor(max_workers=len(services)) as pool:
        stopped = list(pool.map(lambda s: jvm.stop(s[1]), services))
    for (node_cfg, svc), was_running in zip(services, stopped):
        if was_running:
            echo(f"{svc.name}: stopped")
        elif not node_cfg.replicated:
            echo(f"{svc.name}: not running (nothing Parley started)")


def _layouts(cfg: LocalInfraSettings) -> list[LocalInfraSettings]:
    """The single node of ``cfg.data_dir``, and the replicated cluster there if one was ever set up."""
    single = replace(cfg, replicas=1)
    cluster = cfg if cfg.replicated else None
    if cluster is None and (cfg.data_dir / "replicated").is_dir():
        nodes = {p.name.rsplit("-", 1)[1] for p in (cfg.data_dir / "replicated").glob("*-*") if p.is_dir()}
        if nodes:
            cluster = replace(cfg, replicas=max(2, len(nodes)), secure=False, kafka_side_port=0)
    return [single, *([cluster] if cluster else [])]


def status(cfg: LocalInfraSettings) -> list[ServiceState]:
    out = []
    for name, mod in _MODULES.items():
        for index in range(cfg.replicas):
            svc = mod.service(cfg, index)
            pid = jvm.pid_of(svc)
            out.append(
                ServiceState(
                    svc.name,
                    _address(name, cfg, index),
                    pid,
                    rss_mib=jvm.rss_mib(pid) if pid else None,
                    log=mod.log_file(cfg, index),
                )
            )
    return out
