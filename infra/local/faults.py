"""One node of the local stack taken away and brought back, by index: for ``bench.chaos --replicas`` and
the replication tests.

    from infra.local import faults
    pid = faults.kill(cfg, "kafka", 1)        # SIGKILL broker 1 and wait until it is gone; its pid
    pid = faults.pause(cfg, "cassandra", 2)   # SIGSTOP node 2: its sockets stay open, nothing answers
    faults.resume(cfg, "cassandra", 2)        # SIGCONT
    faults.restart(cfg, "kafka", 1)           # start it again on its own data; returns once healthy
    faults.pid(cfg, "cassandra", 0)           # its pid, or None when it is not running

The cluster itself: ``stack.up(replace(cfg, replicas=3))`` starts it (reusing the nodes that run), and
``secure.client_settings(cfg)`` / ``secure.client_env(cfg)`` are how clients reach it (every address,
RF 3 for topics and keyspaces).

``name`` is ``kafka`` or ``cassandra``; node ``i`` (0-based) listens on ``cfg.hosts[i]``, and index 0 is
the single node when ``cfg.replicas`` is 1. Each call acts on one node of ours (by pid file) and raises
``InfraError`` when that node is not running.

A SIGKILL is what a crash does. A replicated cluster's Cassandra nodes sync their commit log before they
acknowledge a write and keep their system tables in it, so a killed node loses nothing a quorum
acknowledged and rejoins as itself. A single node skips that for fast starts (``-Dcassandra.unsafesystem``):
stop it with ``kill(..., sig=signal.SIGTERM)`` or it may come back without its schema.
"""

from __future__ import annotations

import os
import signal
import time

from infra.local import cassandra, jvm, kafka, stack
from infra.local.settings import LocalInfraSettings

_MODULES = {"kafka": kafka, "cassandra": cassandra}


def service(cfg: LocalInfraSettings, name: str, index: int) -> jvm.JvmService:
    if name not in _MODULES:
        raise ValueError(f"no local service {name!r}: kafka or cassandra")
    if not 0 <= index < cfg.replicas:
        raise ValueError(f"{name} has nodes 0..{cfg.replicas - 1} (PARLEY_INFRA_REPLICAS={cfg.replicas}), not {index}")
    return _MODULES[name].service(cfg, index)


def pid(cfg: LocalInfraSettings, name: str, index: int) -> int | None:
    return jvm.pid_of(service(cfg, name, index))


def _running(cfg: LocalInfraSettings, name: str, index: int) -> tuple[jvm.JvmService, int]:
    svc = service(cfg, name, index)
    found = jvm.pid_of(svc)
    if found is None:
        raise jvm.InfraError(f"{svc.name} is not running (no process of ours under {svc.home})")
    return svc, found


def kill(cfg: LocalInfraSettings, name: str, index: int, sig: int = signal.SIGKILL, timeout_s: float = 60.0) -> int:
    """Send ``sig`` (SIGKILL unless told) to node ``index`` of ``name`` and wait until it has exited."""
    svc, target = _running(cfg, name, index)
    os.kill(target, sig)
    if sig == signal.SIGTERM:
        os.kill(target, signal.SIGCONT)  # a paused node cannot act on SIGTERM
    deadline = time.monotonic() + timeout_s
    while jvm.pid_of(svc) is not None:  # a zombie or a reused pid counts as gone
        if time.monotonic() > deadline:
            raise jvm.InfraError(f"{svc.name} (pid {target}) still runs {timeout_s:.0f}s after signal {sig}")
        time.sleep(0.05)
    try:
        os.waitpid(target, os.WNOHANG)  # reap it if this process started it
    except ChildProcessError:
        pass
    return target


def pause(cfg: LocalInfraSettings, name: str, index: int) -> int:
    """SIGSTOP node ``index``: to its peers and clients it hangs, the harder case for timeouts."""
    _, target = _running(cfg, name, index)
    os.kill(target, signal.SIGSTOP)
    return target


def resume(cfg: LocalInfraSettings, name: str, index: int) -> int:
    _, target = _running(cfg, name, index)
    os.kill(target, signal.SIGCONT)
    return target


def restart(cfg: LocalInfraSettings, name: str, index: int, echo: stack.Echo = lambda s: None) -> int:
    """Start node ``index`` again on its data and wait until it is healthy; its pid. A node that runs is
    only awaited (``resume`` a paused one first: it would not get healthy)."""
    service(cfg, name, index)  # a valid node
    [state] = stack.up(cfg, echo=echo, only=(name,), nodes=(index,))
    assert state.pid is not None
    return state.pid
