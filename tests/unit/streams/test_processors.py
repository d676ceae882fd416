"""The processor table: every processor runnable by name, on catalog topics, faust's web server off."""

from __future__ import annotations

import pytest

from parley.errors import ConfigError
from schemas.catalog import TOPICS
from streams.processors import PROCESSORS, build, wiring, worker_args
from tools.topology import SERVICES


def test_the_topology_runs_every_processor_on_catalog_topics_only() -> None:
    streams = {s.module_args[1]: s for s in SERVICES if s.module_args[0] == "streams"}
    assert set(streams) == set(PROCESSORS)
    for service in SERVICES:
        assert set(service.consumes) <= set(TOPICS) and set(service.produces) <= set(TOPICS), service.name
        if service.module_args[0] == "streams":
            assert service.group == f"streams.{service.module_args[1]}"


def test_the_topology_says_what_each_processor_reads_and_writes_as_its_wiring_does() -> None:
    """tools/topology.py is the map operators read; the wirings are what runs. A drift fails here."""
    by_name = {s.module_args[1]: s for s in SERVICES if s.module_args[0] == "streams"}
    for name in PROCESSORS:
        wired, service = wiring(name), by_name[name]
        assert set(wired.reads) <= set(service.consumes), name  # the topology adds reads outside the group
        assert set(wired.writes) == set(service.produces), name


def test_every_processor_builds_its_app_with_its_own_group(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PARLEY_STREAMS_DATADIR", str(tmp_path))
    monkeypatch.setenv("PARLEY_STREAMS_GROUP_PREFIX", "x.")
    for name in PROCESSORS:
        app = build(name)
        assert app.conf.id == f"x.streams.{name}"
        assert (tmp_path / f"x.streams.{name}").is_dir()


def test_unknown_processor_and_bad_settings_name_what_to_change(monkeypatch) -> None:
    with pytest.raises(ConfigError, match="choose one of"):
        build("nope")
    monkeypatch.setenv("PARLEY_ROUTER_DEFAULT_POOL", "huge")
    with pytest.raises(ConfigError, match="PARLEY_ROUTER_DEFAULT_POOL"):
        build("router")


def test_worker_args_turn_the_web_server_off_unless_asked() -> None:
    assert worker_args(()) == ["worker", "--without-web", "-l", "warn"]
    assert worker_args(["worker", "--with-web"]) == ["worker", "--with-web"]
    assert worker_args(["--help"]) == ["--help"]
