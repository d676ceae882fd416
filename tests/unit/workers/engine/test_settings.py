"""EngineSettings from the environment and flags."""

from __future__ import annotations

import pytest

from parley.errors import ConfigError
from parley.settings import describe, from_env
from workers.engine.server import parse_args
from workers.engine.settings import EngineSettings


def test_defaults_match_sglang() -> None:
    s = from_env(EngineSettings, {})
    assert (s.host, s.port, s.backend, s.model_dir) == ("127.0.0.1", 30000, "torch", "")
    assert all(env.startswith("PARLEY_ENGINE_") for env, _, _ in describe(EngineSettings))


def test_environment_then_flags() -> None:
    env = {"PARLEY_ENGINE_BACKEND": "synthetic", "PARLEY_ENGINE_PORT": "31000", "PARLEY_ENGINE_TTFT_MS": "5"}
    s = parse_args(["--port", "32000", "--max-batch", "3"], env)
    assert (s.backend, s.port, s.max_batch, s.synthetic_ttft_ms) == ("synthetic", 32000, 3, 5.0)


def test_the_stream_form_takes_sglangs_flag_and_its_negation() -> None:
    assert from_env(EngineSettings, {}).incremental_streaming_output  # Parley's default, not SGLang's
    assert not from_env(EngineSettings, {"PARLEY_ENGINE_INCREMENTAL_STREAMING_OUTPUT": "false"}).incremental_streaming_output
    assert not parse_args(["--no-incremental-streaming-output"], {}).incremental_streaming_output
    off = {"PARLEY_ENGINE_INCREMENTAL_STREAMING_OUTPUT": "false"}
    assert parse_args(["--incremental-streaming-output"], off).incremental_streaming_output


def test_bad_settings_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="PARLEY_ENGINE_BACKEND"):
        from_env(EngineSettings, {"PARLEY_ENGINE_BACKEND": "vllm"})
    with pytest.raises(ConfigError, match="PARLEY_ENGINE_MODEL_DIR"):
        from_env(EngineSettings, {"PARLEY_ENGINE_MODEL_DIR": "/nonexistent/model"})
    with pytest.raises(ConfigError, match="PARLEY_ENGINE_MAX_TOTAL_TOKENS"):
        from_env(EngineSettings, {"PARLEY_ENGINE_MAX_TOTAL_TOKENS": "10"})
