"""The supervisor waits until each child says it is ready, and stops a stack in waves: front doors, then
processors and workers together, engines last. Real child processes."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from tools.supervisor import StartFailed, Supervisor
from tools.topology import CONTEXT, ENGINE, GATEWAY, ROUTER, WORKER_SMALL, Service


def recorder(service: Service) -> Service:
    return replace(service, module_args=("tests.unit.tools.term_recorder", service.name), health_url=None)


def test_the_gateway_leaves_before_the_rest_are_told_and_the_engine_after_them(tmp_path: Path) -> None:
    services = [recorder(s) for s in (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, GATEWAY)]
    supervisor = Supervisor(tmp_path / "logs", {"RECORD_DIR": str(tmp_path)})
    supervisor.start_all(services, echo=lambda s: None)
    supervisor.stop_all()
    told, left = {}, {}
    for s in services:
        told[s.name], left[s.name] = map(float, (tmp_path / s.name).read_text().split())
    middle = ("worker-small", "context", "router")
    assert all(left["gateway"] <= told[m] for m in middle)
    assert all(left[m] <= told["engine"] for m in middle)
    # One wave is told at once: each leaves after the others were told, not one after another.
    assert max(told[m] for m in middle) < min(left[m] for m in middle)
    assert supervisor.children == []


def test_a_child_is_ready_when_its_gauge_says_so_not_when_it_is_merely_up(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "logs", {"RECORD_DIR": str(tmp_path), "READY_AFTER_S": "2"})
    try:
        child = supervisor.start(recorder(CONTEXT))
        began = time.monotonic()
        supervisor.wait_ready(child)
        assert time.monotonic() - began > 1.0  # its metrics port answered long before: parley_ready was 0 there
    finally:
        supervisor.stop_all()


def test_a_child_that_exits_while_starting_fails_the_start_with_its_log(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "logs")  # no RECORD_DIR: the recorder dies at once
    try:
        with pytest.raises(StartFailed, match="exited with 1 while starting"):
            supervisor.wait_ready(supervisor.start(recorder(CONTEXT)), timeout=30)
    finally:
        supervisor.stop_all()


def _draws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *ports: int) -> None:
    """free_port's random draws are ``ports`` in turn; its reservations live in ``tmp_path``."""
    from tools import supervisor

    monkeypatch.setattr(supervisor, "RESERVED", tmp_path / "ports")
    drawn = iter(ports)
    monkeypatch.setattr(supervisor._PORTS, "randrange", lambda low, high: next(drawn))


def test_a_port_handed_out_is_not_handed_out_again_before_its_server_binds_it(monkeypatch, tmp_path: Path) -> None:
    from tools.supervisor import free_port

    port, other = free_ports_now(2)
    _draws(monkeypatch, tmp_path, port, port, other)
    assert free_port() == port
    assert free_port() == other  # the second draw of ``port`` is passed over, though nothing listens on it yet


def test_another_process_reservation_is_honoured_until_it_expires(monkeypatch, tmp_path: Path) -> None:
    from tools import supervisor

    port, other = free_ports_now(2)
    (tmp_path / "ports").write_text(f"{port}@{time.time()}\n{other}@{time.time() - supervisor.HOLD_S - 1}\ngarbage\n")
    _draws(monkeypatch, tmp_path, port, other)
    assert supervisor.free_port() == other  # ``port`` is another's for now; ``other``'s hold has run out
    assert {int(line.split("@")[0]) for line in (tmp_path / "ports").read_text().split()} == {port, other}


def free_ports_now(n: int) -> list[int]:
    """``n`` ports nothing listens on, from the kernel (not from free_port's own draws)."""
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
