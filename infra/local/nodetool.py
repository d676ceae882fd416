"""nodetool against the local Cassandra: its ``NodeTool`` class from the jars the node runs on, over
the local-only JMX port (``infra.local.cassandra.jmx_port``). No ``nodetool`` script is installed:
the node is started from Maven jars, not from a Cassandra distribution.

A node of ours started before its JVM options had the JMX port has no JMX server; the JDK can open
one in the running JVM (``jcmd <pid> ManagementAgent.start``, 127.0.0.1 only, like Cassandra's own
local JMX), and ``run`` does so once rather than ask for a restart. Cassandra registers its MBeans in
the platform MBean server either way.
"""

from __future__ import annotations

import shutil
import subprocess

from infra.local import cassandra
from infra.local.jvm import InfraError, echo_stderr, fetch_classpath, pid_of
from infra.local.settings import LocalInfraSettings

MAIN = "org.apache.cassandra.tools.NodeTool"
#: nodetool's own logging: warnings and errors on stderr, not the jars' DEBUG chatter.
LOGBACK = """<configuration>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR"/></root>
</configuration>
"""


def flush(cfg: LocalInfraSettings, keyspace: str | None = None) -> None:
    """Write the memtables of ``keyspace`` (None: of every keyspace) to SSTables, and wait until they are."""
    run(cfg, "flush", *([keyspace] if keyspace else []))


def run(cfg: LocalInfraSettings, *args: str, timeout_s: float = 300.0) -> str:
    """``nodetool <args>`` against the node of ``cfg``; its output. InfraError if it fails."""
    try:
        return _nodetool(cfg, args, timeout_s)
    except _NoJmx:
        _open_jmx(cfg)
        return _nodetool(cfg, args, timeout_s)


class _NoJmx(InfraError):
    """Nothing answers on the node's JMX port."""


def _open_jmx(cfg: LocalInfraSettings) -> None:
    """Start the JDK's JMX agent on the JMX port inside our running node, which was started without it."""
    port = cassandra.jmx_port(cfg)
    pid = pid_of(cassandra.service(cfg))
    jcmd = shutil.which("jcmd")
    if pid is None or jcmd is None:
        raise InfraError(
            f"no JMX on 127.0.0.1:{port}, and "
            + ("no Cassandra of ours is running there" if pid is None else "`jcmd` (the JDK's) is not on PATH to open it")
        )
    agent = [
        f"jmxremote.{key}={value}"
        for key, value in (("host", "127.0.0.1"), ("port", port), ("rmi.port", port), ("authenticate", "false"), ("ssl", "false"))
    ]
    result = subprocess.run([jcmd, str(pid), "ManagementAgent.start", *agent], capture_output=True, text=True, timeout=60)
    if result.returncode != 0 or "successfully" not in result.stdout:
        raise InfraError(f"could not open JMX in Cassandra (pid {pid}) on 127.0.0.1:{port}:\n{result.stdout}{result.stderr}")


def _nodetool(cfg: LocalInfraSettings, args: tuple[str, ...], timeout_s: float) -> str:
    java = shutil.which("java")
    if java is None:
        raise InfraError("`java` is not on PATH; nodetool needs Java 17")
    lib = fetch_classpath(cassandra.POM, cfg.cache_dir, cassandra.tag(), echo_stderr)
    tools = lib.parent / "nodetool"  # beside the jars, not in the data dir an audit reads
    tools.mkdir(exist_ok=True)
    (tools / "logback-tools.xml").write_text(LOGBACK)
    port = cassandra.jmx_port(cfg)
    cmd = [
        java,
        *cassandra.JAVA17_ACCESS,
        f"-Dlogback.configurationFile={tools / 'logback-tools.xml'}",
        # nodetool keeps a history of its commands in ~/.cassandra: there, not in the user's home.
        f"-Duser.home={tools}",
        "-cp",
        f"{lib}/*",
        MAIN,
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        *args,
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"nodetool {' '.join(args)} did not finish within {timeout_s:.0f}s") from exc
    output = result.stdout + result.stderr
    if result.returncode != 0 and "Connection refused" in output:
        raise _NoJmx(f"no JMX on 127.0.0.1:{port}")
    if result.returncode != 0:
        raise InfraError(f"nodetool {' '.join(args)} failed (exit {result.returncode}):\n{output[-2000:]}")
    return result.stdout
