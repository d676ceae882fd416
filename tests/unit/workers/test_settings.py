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
