"""docker-compose.yml runs the same stack as infra/local, wired with Parley's own settings.

There is no Docker engine here to run it, so this checks what can be checked:
it parses, names the services, pins the same versions as the Maven POMs, and
every PARLEY_* variable it sets is a real setting."""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.local import cassandra, kafka
from infra.local.jvm import version_of
from parley.settings import describe

COMPOSE = Path(__file__).resolve().parents[3] / "docker-compose.yml"


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_services_use_the_official_images_at_the_local_versions() -> None:
    services = _compose()["services"]
    assert services["kafka"]["image"] == f"apache/kafka:{version_of(kafka.POM, 'kafka.version')}"
    assert services["cassandra"]["image"] == f"cassandra:{version_of(cassandra.POM, 'cassandra.version')}"


def test_parley_services_are_wired_with_known_settings() -> None:
    from tools.cli import _settings_by_service

    known = {name for _, cls in _settings_by_service() for name, _, _ in describe(cls)}
    services = _compose()["services"]
    wired = [s for s in services.values() if "PARLEY_KAFKA_BOOTSTRAP" in s.get("environment", {})]
    assert wired, "no Parley service in docker-compose.yml"
    for service in services.values():
        assert {k for k in service.get("environment", {}) if k.startswith("PARLEY_")} <= known
    for service in wired:
        env = service["environment"]
        assert set(k for k in env if k.startswith("PARLEY_")) <= known
        assert env["PARLEY_KAFKA_BOOTSTRAP"].split(":")[0] == "kafka"
        assert env["PARLEY_CASSANDRA_HOSTS"] == "cassandra"
        assert {"kafka", "cassandra"} <= set(service["depends_on"])


def test_kafka_is_single_node_kraft() -> None:
    env = _compose()["services"]["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_every_service_of_the_topology_runs_in_compose() -> None:
    from tools.topology import SERVICES

    services = _compose()["services"]
    for service in SERVICES:
        if service.name.startswith("worker-") and service.name not in services:
            continue  # pools beyond small share the image; compose runs the small pool's worker
        assert service.name in services, service.name
        assert services[service.name]["command"][2:] == list(service.module_args), service.name
