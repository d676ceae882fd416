"""`python -m edge` (also `parley edge`): HAProxy in front of the sharded gateways, configured by Parley.

It writes HAProxy's configuration (edge/config.py) from the settings and then *becomes* HAProxy
(exec: the same process id, in the foreground), so a supervisor starts, signals and waits for it
as for any service. SIGTERM or SIGINT stops it at once: it stops listening and closes its
connections; SSE clients resume through another edge with ``Last-Event-ID``. (SIGUSR1 is
HAProxy's soft stop: no new connections, open requests run to their end.)

The configuration lives in an anonymous in-memory file (memfd), as does the certificate joined to
its key: nothing is left on disk. ``python -m edge --config`` prints the configuration instead.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from documents.settings import DocumentSettings
from edge.config import FORM_OVERHEAD, Limits, render
from edge.settings import EdgeSettings
from gateway.settings import GatewaySettings
from parley.errors import ConfigError
from parley.logs import setup_logging
from parley.settings import TelemetrySettings, from_env
from schemas.catalog import TOPICS

log = logging.getLogger(__name__)

#: Parley's Lua for HAProxy: the routing rule, and the hop-by-hop headers it removes (in every thread)...
LUA = [str(Path(__file__).with_name(name)) for name in ("route.lua", "headers.lua")]
#: ... and the check that each gateway runs as the shard its place in the list says (once).
SHARD_CHECK = str(Path(__file__).with_name("shards.lua"))


def configuration(settings: EdgeSettings, pem_path: str | None) -> str:
    """The configuration for this environment's settings (the gateway's body limits, the metrics port)."""
    telemetry = from_env(TelemetrySettings)
    gateway = from_env(GatewaySettings)
    limits = Limits(gateway.max_body_bytes, from_env(DocumentSettings).max_bytes + FORM_OVERHEAD, gateway.import_max_bytes)
    metrics = (telemetry.metrics_host, telemetry.metrics_port) if telemetry.metrics_port > 0 else None
    return render(settings, limits, TOPICS["chat.tokens"].partitions, LUA, SHARD_CHECK, pem_path, metrics)


def _memfd(name: str, data: bytes) -> str:
    """A path HAProxy can open for ``data``, held by a file descriptor it inherits."""
    fd = os.memfd_create(name, 0)  # no MFD_CLOEXEC: it must survive the exec
    os.write(fd, data)
    return f"/proc/self/fd/{fd}"


def _pem(settings: EdgeSettings) -> str | None:
    """The certificate chain and its key in one PEM, as HAProxy's ``crt`` takes them."""
    if not settings.tls_cert:
        return None
    data = Path(settings.tls_cert).read_bytes()
    if settings.tls_key:
        data = data.rstrip(b"\n") + b"\n" + Path(settings.tls_key).read_bytes()
    return _memfd("edge.pem", data)


def main(argv: list[str]) -> None:
    setup_logging("edge")
    settings = from_env(EdgeSettings)
    if argv == ["--config"]:
        print(configuration(settings, settings.tls_cert or None), end="")
        return
    if argv:
        raise ConfigError(f"`python -m edge` takes no arguments but --config, got {argv}")
    if not os.access(settings.haproxy, os.X_OK):
        raise ConfigError(
            f"PARLEY_EDGE_HAPROXY={settings.haproxy!r} is not an executable: install Debian's haproxy "
            "(infra/local/debian-packages.sh, or `make install`)"
        )
    config = _memfd("haproxy.cfg", configuration(settings, _pem(settings)).encode())
    log.info("starting haproxy", extra={"port": settings.port, "gateways": len(settings.addresses)})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(settings.haproxy, [settings.haproxy, "-db", "-f", config])  # -db: in the foreground, logs on stdout


if __name__ == "__main__":
    main(sys.argv[1:])
