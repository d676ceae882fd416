"""Process bookkeeping of infra/local without starting a JVM."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.local.jvm import InfraError, JvmService, pid_of, port_taken, start, stop


def _service(tmp_path: Path, port: int) -> JvmService:
    return JvmService(
        name="probe", pom=tmp_path / "x.pom", main_class="Nope", home=tmp_path, ports=(port,), jvm_options=()
    )


def _spawn(svc: JvmService, code: str) -> subprocess.Popen:
    """A stand-in for the service's JVM, carrying its marker, once it has exec'd."""
    proc = subprocess.Popen([sys.executable, "-c", code, svc.marker])
    svc.pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 5
    while pid_of(svc) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def test_a_pid_file_naming_a_stranger_is_not_ours(tmp_path: Path) -> None:
    svc = _service(tmp_path, 1)
    svc.pid_file.write_text(f"{os.getpid()}\n")  # this pytest process: alive, but not our service
    assert pid_of(svc) is None
    assert stop(svc) is False
    assert os.getpid()  # still here


def test_a_pid_file_naming_a_dead_process_is_removed(tmp_path: Path) -> None:
    svc = _service(tmp_path, 1)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    svc.pid_file.write_text(f"{proc.pid}\n")
    assert pid_of(svc) is None
    assert not svc.pid_file.exists()


def test_a_process_with_our_marker_is_found_and_stopped(tmp_path: Path) -> None:
    svc = _service(tmp_path, 1)
    proc = _spawn(svc, "import time; time.sleep(60)")
    assert pid_of(svc) == proc.pid
    assert stop(svc, timeout=5) is True
    assert proc.wait(timeout=5) is not None


def test_a_port_held_by_a_stranger_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert port_taken(port)
        with pytest.raises(InfraError, match=rf"port\(s\) {port} .* in use by a process Parley did not start"):
            start(_service(tmp_path, port), tmp_path)
    assert not port_taken(port)


def test_a_service_that_dies_while_starting_reports_its_log_tail(tmp_path: Path) -> None:
    from infra.local.jvm import wait_healthy

    svc = _service(tmp_path, 1)
    svc.console_log.parent.mkdir(parents=True)
    svc.console_log.write_text("Error: could not bind the sky\n")
    proc = _spawn(svc, "pass")
    proc.wait()
    with pytest.raises(InfraError, match="(?s)probe exited while starting.*could not bind the sky"):
        wait_healthy(svc, lambda: False, timeout=30, echo=lambda s: None, log_file=tmp_path / "none.log")


def test_a_service_that_never_gets_healthy_times_out_with_its_log(tmp_path: Path) -> None:
    from infra.local.jvm import wait_healthy

    svc = _service(tmp_path, 1)
    (tmp_path / "server.log").write_text("still replaying the commit log\n")
    proc = _spawn(svc, "import time; time.sleep(30)")
    try:
        with pytest.raises(InfraError, match="(?s)not healthy after 1s.*still replaying"):
            wait_healthy(svc, lambda: False, timeout=1, echo=lambda s: None, log_file=tmp_path / "server.log")
    finally:
        proc.kill()
        proc.wait()
