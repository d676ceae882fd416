"""Worker settings: environment names, defaults that work locally, errors that name the variable."""

from __future__ import annotations

import os
import socket

import pytest

from parley.errors import ConfigError
from parley.settings import describe, from_env
from workers.settings import WorkerSettings


def test_defaults_serve_the_small_pool_from_the_local_engine() -> None:
    s = from_env(WorkerSettings, {})
    assert (s.pool, s.engine_url, s.group) == ("small", "http://127.0.0.1:30000", "workers.small")
    assert (s.coalesce_ms, s.coalesce_tokens, s.linger_ms) == (80.0, 32, 5.0)
    assert s.worker_id == f"{socket.gethostname()}-{os.getpid()}"
    assert s.capacity == s.max_concurrency + s.max_queued


def test_environment_overrides() -> None:
    s = from_env(
        WorkerSettings,
        {"PARLEY_WORKER_POOL": "frontier", "PARLEY_WORKER_MAX_CONCURRENCY": "3", "PARLEY_WORKER_ID": "gpu-7"},
    )
    assert (s.pool, s.max_concurrency, s.worker_id, s.group) == ("frontier", 3, "gpu-7", "workers.frontier")


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"PARLEY_WORKER_POOL": "huge"}, "PARLEY_WORKER_POOL"),
        ({"PARLEY_WORKER_MAX_CONCURRENCY": "0"}, "PARLEY_WORKER_MAX_CONCURRENCY"),
        ({"PARLEY_WORKER_COALESCE_TOKENS": "0"}, "PARLEY_WORKER_COALESCE_TOKENS"),
        ({"PARLEY_WORKER_LINGER_MS": "-1"}, "PARLEY_WORKER_LINGER_MS"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        from_env(WorkerSettings, env)


def test_every_setting_is_documented_under_the_worker_prefix() -> None:
    for name, _, doc in describe(WorkerSettings):
        assert name.startswith("PARLEY_WORKER_") and doc


def test_one_process_fronting_several_engines_runs_a_replica_per_engine() -> None:
    s = from_env(
        WorkerSettings,
        {"PARLEY_WORKER_ENGINE_URLS": "http://gpu-0:30000/, http://gpu-1:30000", "PARLEY_WORKER_ID": "w"},
    )
    replicas = s.replicas()
    assert [(r.worker_id, r.engine_url) for r in replicas] == [("w.0", "http://gpu-0:30000"), ("w.1", "http://gpu-1:30000")]
    assert {r.group for r in replicas} == {"workers.small"}  # one group: each engine is a member
    with pytest.raises(ValueError, match="replicas"):
        s.engine_url
    single = from_env(WorkerSettings, {"PARLEY_WORKER_ID": "w"})
    assert single.replicas() == [single] and single.worker_id == "w"


@pytest.mark.parametrize(
    ("urls", "problem"),
    [("", "names no engine"), ("gpu-0:30000", "not an http"), ("http://a:1,http://a:1/", "twice")],
)
def test_bad_engine_lists_are_refused(urls: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"PARLEY_WORKER_ENGINE_URLS.*{problem}"):
        from_env(WorkerSettings, {"PARLEY_WORKER_ENGINE_URLS": urls})


def test_the_old_single_url_setting_is_refused_by_name() -> None:
    from workers.worker import parse_args, settings_from

    with pytest.raises(ConfigError, match="PARLEY_WORKER_ENGINE_URL is no longer read: set PARLEY_WORKER_ENGINE_URLS"):
        settings_from(parse_args([]), {"PARLEY_WORKER_ENGINE_URL": "http://x:1"})
    both = settings_from(parse_args(["--engine-url", "http://a:1", "--engine-url", "http://b:1"]), {})
    assert both.engine_url_list == ["http://a:1", "http://b:1"]
