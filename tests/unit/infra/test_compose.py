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


def _enabled(services: dict, active: set[str]) -> set[str]:
    """The Compose spec's rule: a service without profiles always runs, one with profiles only when one is active."""
    return {name for name, s in services.items() if not s.get("profiles") or active & set(s["profiles"])}


def _default_profiles() -> set[str]:
    env = dict(line.split("=", 1) for line in (COMPOSE.parent / ".env").read_text().splitlines() if line and not line.startswith("#"))
    return set(env["COMPOSE_PROFILES"].split(","))


def test_the_gpu_profile_swaps_the_small_pools_engine_behind_the_same_worker() -> None:
    services = _compose()["services"]
    serving = {}
    for label, active in (("default", _default_profiles()), ("gpu", {"gpu"})):
        enabled = _enabled(services, active)
        small = [n for n in enabled if "engine-small" in services[n].get("networks", {}).get("default", {}).get("aliases", [])]
        assert len(small) == 1, f"{label}: one engine answers as engine-small, not {small}"
        assert {"worker-small", "titler", "gateway"} <= enabled
        serving[label] = small[0]
    assert serving == {"default": "engine", "gpu": "sglang-small"}
    for name in ("worker-small", "titler"):
        env = services[name]["environment"]
        urls = env.get("PARLEY_WORKER_ENGINE_URLS") or env.get("PARLEY_TITLER_ENGINE_URL")
        assert urls == "http://engine-small:30000", name
    sglang = services["sglang-small"]
    assert sglang["image"].startswith("lmsysorg/sglang:")
    assert sglang["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert sglang["command"][sglang["command"].index("--port") + 1] == "30000"
    assert sglang["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    from tests.fixtures.sglang_flags import SERVER, problems
    from tools.fleet.spec import load

    assert problems(tuple(sglang["command"]), SERVER["flags"]) == [], "flags of the pinned SGLang release"
    assert sglang["image"] == load().images.sglang, "the image of the fleet spec's release"


def test_the_document_workers_scan_with_freshclams_signatures() -> None:
    services = _compose()["services"]
    documents, freshclam = services["documents"], services["freshclam"]
    assert documents["environment"]["PARLEY_DOCUMENTS_REAL_SIGNATURES"] == "true"  # refused to start without them
    db = documents["environment"]["PARLEY_DOCUMENTS_CLAMAV_DB"]
    assert f"clamav:{db}:ro" in documents["volumes"] and f"clamav:{db}" in freshclam["volumes"]
    assert documents["depends_on"]["freshclam"] == {"condition": "service_completed_successfully"}
    assert {"kafka", "cassandra", "setup"} <= set(documents["depends_on"])
    conf = freshclam["command"][1].split("=", 1)[1].removeprefix("/app/")
    assert f"DatabaseDirectory {db}\n" in (COMPOSE.parent / conf).read_text()
