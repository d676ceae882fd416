"""Run a JVM service from Maven Central jars as a plain background process.

What each service shares: fetch its runtime classpath with ``mvn`` into a cache
outside the repository, start it detached with a pid file, tell our process
from a stranger on the same port, wait for health with progress, and stop only
what we started.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"


class InfraError(RuntimeError):
    """A local service could not be fetched, started or reached; the message says what to do."""


@dataclass(frozen=True)
class JvmService:
    name: str  # "kafka" | "cassandra"
    pom: Path  # resolves the runtime classpath
    main_class: str
    home: Path  # .data/<name>: config, data, logs, pid file
    ports: tuple[int, ...]  # every port it listens on at ``host`` (all must be free to start)
    jvm_options: tuple[str, ...]
    args: tuple[str, ...] = ()
    classpath_first: tuple[Path, ...] = ()  # e.g. a conf dir that must precede the jars
    host: str = "127.0.0.1"  # the loopback address it listens on
    loopback_ports: tuple[int, ...] = ()  # ports it listens on at 127.0.0.1 whatever its host (JMX)

    @property
    def pid_file(self) -> Path:
        return self.home / f"{self.name}.pid"

    @property
    def console_log(self) -> Path:
        return self.home / "logs" / "console.log"

    @property
    def marker(self) -> str:
        """A JVM flag that identifies our process in /proc/<pid>/cmdline."""
        return f"-Dparley.service={self.name}@{self.home}"


def version_of(pom: Path, prop: str) -> str:
    match = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom.read_text())
    if not match:
        raise InfraError(f"{pom} has no <{prop}>")
    return match.group(1)


def fetch_classpath(pom: Path, cache_dir: Path, tag: str, echo: Callable[[str], None]) -> Path:
    """``cache_dir/<tag>/lib`` holding the runtime jars of ``pom``; fetched once."""
    lib = cache_dir / tag / "lib"
    done = lib.parent / ".complete"
    if done.exists():
        return lib
    if shutil.which("mvn") is None:
        raise InfraError("`mvn` is not on PATH; install Maven (and Java 17) to fetch Kafka and Cassandra")
    echo(f"fetching {tag} from Maven Central into {lib.parent} (once)…")
    if lib.exists():
        shutil.rmtree(lib)
    cmd = ["mvn", "-q", "-B", "-f", str(pom), DEPENDENCY_PLUGIN, "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-3000:]
        raise InfraError(f"mvn could not fetch {tag} (exit {result.returncode}):\n{tail}")
    done.write_text(" ".join(cmd) + "\n")
    return lib


def pid_of(service: JvmService) -> int | None:
    """The pid of our running process for ``service``, or None (a stale pid file is removed)."""
    try:
        pid = int(service.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        cmdline = ""
    if service.marker in cmdline.split("\0"):
        return pid
    if not _alive(pid):
        service.pid_file.unlink(missing_ok=True)  # stale: a later start writes a new one
    # Alive without our marker: the pid was reused by someone else (or has not exec'd yet).
    return None


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def start(service: JvmService, lib: Path) -> int:
    """Launch ``service`` detached (it outlives this process); returns its pid."""
    wanted = [(service.host, p) for p in service.ports] + [("127.0.0.1", p) for p in service.loopback_ports]
    taken = [f"{port} on {host}" for host, port in wanted if port_taken(port, host)]
    if taken:
        raise InfraError(
            f"cannot start {service.name}: port(s) {', '.join(taken)} are in use by a "
            f"process Parley did not start. Stop it, or choose other ports with the PARLEY_*_PORT settings "
            f"(see `parley infra --help`)."
        )
    java = shutil.which("java")
    if java is None:
        raise InfraError("`java` is not on PATH; Kafka and Cassandra need Java 17")
    service.console_log.parent.mkdir(parents=True, exist_ok=True)
    classpath = ":".join([*(str(p) for p in service.classpath_first), f"{lib}/*"])
    cmd = [java, service.marker, *service.jvm_options, "-cp", classpath, service.main_class, *service.args]
    with open(service.console_log, "ab") as console:
        proc = subprocess.Popen(
            cmd,
            cwd=service.home,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not killed with the shell or make that started it
            close_fds=True,
        )
    service.pid_file.write_text(f"{proc.pid}\n")
    _await_exec(service, proc)
    return proc.pid


def _await_exec(service: JvmService, proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """Until /proc shows the new command line, the child still looks like us, not like the service."""
    deadline = time.monotonic() + timeout
    while pid_of(service) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def wait_healthy(
    service: JvmService,
    check: Callable[[], bool],
    timeout: float,
    echo: Callable[[str], None],
    log_file: Path,
) -> float:
    """Seconds until ``check()`` passed; InfraError with the log tail if it died or timed out."""
    began = time.monotonic()
    last_note = began
    while True:
        if check():
            return time.monotonic() - began
        elapsed = time.monotonic() - began
        if pid_of(service) is None:
            raise InfraError(f"{service.name} exited while starting.\n{log_tail(log_file, service.console_log)}")
        if elapsed > timeout:
            raise InfraError(
                f"{service.name} not healthy after {timeout:.0f}s (PARLEY_INFRA_TIMEOUT).\n"
                f"{log_tail(log_file, service.console_log)}"
            )
        if time.monotonic() - last_note >= 5:
            echo(f"  waiting for {service.name}… {elapsed:.0f}s")
            last_note = time.monotonic()
        time.sleep(0.25)


def log_tail(*paths: Path, lines: int = 25) -> str:
    out = []
    for path in paths:
        if path.exists():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- last lines of {path} ---\n" + "\n".join(text))
    return "\n".join(out) or "(no log written)"


def stop(service: JvmService, timeout: float = 30.0) -> bool:
    """Stop our process for ``service`` (SIGTERM, then SIGKILL). False if none was running."""
    pid = pid_of(service)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)  # one paused by a fault (infra.local.faults) acts on it only once resumed
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_of(service) is not None and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    service.pid_file.unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of ours counts as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def echo_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
