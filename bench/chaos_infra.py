"""The chaos bench's own Kafka and Cassandra, and the faults it does to them.

Both run on ports and a data dir of the run's own (never the shared 9092/9042 on 127.0.0.1: they are
SIGKILLed and SIGSTOPped here). One node of each (``replicas=1``): every client reaches the broker
through a ``KafkaProxy`` on a second listener, so the bench can make it slow. A replicated cluster
(``replicas=3``, ``--replicas 3``): three brokers and three Cassandra nodes on loopback addresses of the
run's own (from 127.0.0.5: the tests' cluster has .2-.4), RF 3 and ``min.insync.replicas`` 2; no proxy
(a second listener per broker is not supported there), so a broker is paused instead of slowed.
Faults name a node by index.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from infra.local import cassandra as local_cassandra, faults, jvm, kafka as local_kafka, secure, stack as local_stack
from infra.local.settings import LocalInfraSettings
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tests.e2e.kafka_proxy import KafkaProxy
from tools.supervisor import free_port

_MODULES = {"kafka": local_kafka, "cassandra": local_cassandra}
#: The replicated cluster's first address: clear of the tests' (127.0.0.2-4) and the shared single node.
REPLICA_ADDRESS = "127.0.0.5"


class PrivateInfra:
    """Kafka and Cassandra of the run's own: one node of each behind a proxy, or ``replicas`` of each."""

    def __init__(self, data_dir: Path, replicas: int = 1) -> None:
        base = replace(
            from_env(LocalInfraSettings),
            data_dir=data_dir,
            kafka_port=free_port(),
            kafka_controller_port=free_port(),
            cassandra_port=free_port(),
            cassandra_storage_port=free_port(),
            # A node restarted on two cores busy with the stack (and its neighbours) has taken over 180 s.
            start_timeout_s=900.0,
            # It is SIGKILLed: what it acknowledged must survive that (rows = log), as on a replicated node.
            cassandra_durable=True,
        )
        self.proxy: KafkaProxy | None = None
        self.proxy_port = 0
        if replicas > 1:
            self.cfg = replace(base, replicas=replicas, replica_address=REPLICA_ADDRESS)
            return
        proxy_port, side_port = free_port(), free_port()
        self.cfg = replace(
            base, kafka_side_port=side_port, kafka_side_advertised_port=proxy_port, kafka_heap="384m", cassandra_heap="768m"
        )
        self.proxy = KafkaProxy(proxy_port, side_port)
        self.proxy_port = proxy_port

    @property
    def nodes(self) -> dict[str, int]:
        """How many nodes of each service there are (fault targets are ``(service, index)``)."""
        return {"kafka": self.cfg.replicas, "cassandra": self.cfg.replicas}

    @property
    def can_slow(self) -> bool:
        """Whether the broker can be slowed (only through the single node's proxy)."""
        return self.proxy is not None

    def client_settings(self) -> tuple[KafkaSettings, CassandraSettings]:
        """How the stack's clients reach it: every address, and RF 3 for topics and keyspaces when replicated."""
        kafka, cassandra = secure.client_settings(self.cfg)
        if self.proxy is not None:
            kafka = replace(kafka, bootstrap=f"127.0.0.1:{self.proxy_port}")
        return kafka, cassandra

    def client_env(self) -> dict[str, str]:
        kafka, cassandra = self.client_settings()
        return {
            "PARLEY_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "PARLEY_KAFKA_REPLICATION": str(kafka.replication),
            "PARLEY_CASSANDRA_HOSTS": cassandra.hosts,
            "PARLEY_CASSANDRA_PORT": str(cassandra.port),
            "PARLEY_CASSANDRA_REPLICATION": cassandra.replication,
        }

    def up(self) -> None:
        if self.proxy is not None:
            self.proxy.start()
        local_stack.up(self.cfg, echo=lambda s: None)

    def down(self) -> None:
        for name, mod in _MODULES.items():
            for node in range(self.cfg.replicas):
                svc = mod.service(self.cfg, node)
                pid = jvm.pid_of(svc)
                if pid is not None:
                    os.kill(pid, signal.SIGCONT)  # a paused JVM does not answer SIGTERM
                jvm.stop(svc)
        if self.proxy is not None:
            self.proxy.stop()

    def kill(self, name: str, node: int = 0) -> None:
        """SIGKILL the node, then start it again on the same data dir and ports (returns once healthy)."""
        svc = faults.service(self.cfg, name, node)
        pid = faults.kill(self.cfg, name, node)
        _wait_gone(pid, svc)
        faults.restart(self.cfg, name, node)

    def pause(self, name: str, seconds: float, node: int = 0, meanwhile: Callable[[], object] = lambda: None) -> None:
        """SIGSTOP the node for ``seconds``, then SIGCONT: to its clients it hangs, sockets open.
        ``meanwhile`` runs halfway through."""
        faults.pause(self.cfg, name, node)
        try:
            time.sleep(seconds / 2)
            began = time.monotonic()
            meanwhile()
            time.sleep(max(0.0, seconds / 2 - (time.monotonic() - began)))
        finally:
            faults.resume(self.cfg, name, node)

    def slow(self, seconds: float, delay_s: float) -> None:
        """Every Kafka request and response through the proxy waits ``delay_s`` for ``seconds``."""
        if self.proxy is None:
            raise RuntimeError("only the single broker is behind a proxy")
        self.proxy.delay_s = delay_s
        try:
            time.sleep(seconds)
        finally:
            self.proxy.delay_s = 0.0


def _wait_gone(pid: int, svc: jvm.JvmService) -> None:
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
        if not any(jvm.port_taken(p, svc.host) for p in svc.ports):
            return
        time.sleep(0.1)
