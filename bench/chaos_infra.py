"""The chaos bench's own Kafka and Cassandra, and the faults it does to them.

Both run on free ports and a data dir of the run's own (never the shared 9092/9042: they are SIGKILLed
and SIGSTOPped here). Every client of the stack reaches Kafka through a ``KafkaProxy`` on a second
listener of the broker, so the bench can make the broker slow. Faults name a node by index: one of
each today, so always 0; a replicated infra adds nodes without changing the rotation.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from infra.local import cassandra as local_cassandra, jvm, kafka as local_kafka, stack as local_stack
from infra.local.settings import LocalInfraSettings
from parley.settings import from_env
from tests.e2e.kafka_proxy import KafkaProxy
from tools.supervisor import free_port

_MODULES = {"kafka": local_kafka, "cassandra": local_cassandra}


class PrivateInfra:
    """One Kafka broker (behind a proxy) and one Cassandra node of the run's own."""

    def __init__(self, data_dir: Path) -> None:
        proxy_port, side_port = free_port(), free_port()
        self.cfg = replace(
            from_env(LocalInfraSettings),
            data_dir=data_dir,
            kafka_port=free_port(),
            kafka_controller_port=free_port(),
            kafka_side_port=side_port,
            kafka_side_advertised_port=proxy_port,
            cassandra_port=free_port(),
            cassandra_storage_port=free_port(),
            kafka_heap="384m",
            cassandra_heap="768m",
            # A node restarted on two cores busy with the stack (and its neighbours) has taken over 180 s.
            start_timeout_s=900.0,
        )
        self.proxy = KafkaProxy(proxy_port, side_port)
        self.proxy_port = proxy_port

    @property
    def nodes(self) -> dict[str, int]:
        """How many nodes of each service there are (fault targets are ``(service, index)``)."""
        return {"kafka": 1, "cassandra": 1}

    @property
    def bootstrap(self) -> str:
        """Where the stack's clients find Kafka: the proxy."""
        return f"127.0.0.1:{self.proxy_port}"

    def up(self) -> None:
        self.proxy.start()
        local_stack.up(self.cfg, echo=lambda s: None)

    def down(self) -> None:
        for name, mod in _MODULES.items():
            pid = jvm.pid_of(mod.service(self.cfg))
            if pid is not None:
                os.kill(pid, signal.SIGCONT)  # a paused JVM does not answer SIGTERM
            jvm.stop(mod.service(self.cfg))
        self.proxy.stop()

    def _pid(self, name: str, node: int) -> int:
        assert node == 0, "one node of each service until infra/local runs replicas"
        pid = jvm.pid_of(_MODULES[name].service(self.cfg))
        if pid is None:
            raise RuntimeError(f"{name} node {node} is not running (see {_MODULES[name].log_file(self.cfg)})")
        return pid

    def kill(self, name: str, node: int = 0) -> None:
        """SIGKILL the node, then start it again on the same data dir and ports (returns once healthy)."""
        pid = self._pid(name, node)
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, _MODULES[name].service(self.cfg).ports)
        local_stack.up(self.cfg, echo=lambda s: None, only=(name,))

    def pause(self, name: str, seconds: float, node: int = 0, meanwhile: Callable[[], object] = lambda: None) -> None:
        """SIGSTOP the node for ``seconds``, then SIGCONT: to its clients it hangs, sockets open.
        ``meanwhile`` runs halfway through."""
        pid = self._pid(name, node)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds / 2)
            began = time.monotonic()
            meanwhile()
            time.sleep(max(0.0, seconds / 2 - (time.monotonic() - began)))
        finally:
            os.kill(pid, signal.SIGCONT)

    def slow(self, seconds: float, delay_s: float, node: int = 0) -> None:
        """Every Kafka request and response through the proxy waits ``delay_s`` for ``seconds``."""
        assert node == 0, "one broker until infra/local runs replicas"
        self.proxy.delay_s = delay_s
        try:
            time.sleep(seconds)
        finally:
            self.proxy.delay_s = 0.0


def _wait_gone(pid: int, ports: tuple[int, ...]) -> None:
    """Until ``pid`` is reaped (the JVMs are children of this process) and its ports are free: a JVM's
    main thread is a zombie before its other threads have let go of their sockets."""
    for _ in range(600):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:  # not ours, or reaped already
            if not Path(f"/proc/{pid}").exists():
                break
        time.sleep(0.1)
    for _ in range(600):
        if not any(jvm.port_taken(p) for p in ports):
            return
        time.sleep(0.1)
