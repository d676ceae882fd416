from __future__ import annotations

from pathlib import Path

import pytest

from infra.local.settings import LocalInfraSettings
from parley.settings import CassandraSettings, KafkaSettings, describe, from_env


def test_defaults_work_locally() -> None:
    assert from_env(KafkaSettings, {}).bootstrap == "127.0.0.1:9092"
    assert from_env(CassandraSettings, {}).port == 9042


def test_environment_overrides_with_types() -> None:
    cfg = from_env(LocalInfraSettings, {"PARLEY_KAFKA_PORT": "19092", "PARLEY_DATA_DIR": "/tmp/x", "PARLEY_INFRA_TIMEOUT": "5"})
    assert cfg.kafka_port == 19092 and cfg.data_dir == Path("/tmp/x") and cfg.start_timeout_s == 5.0
    assert from_env(CassandraSettings, {"PARLEY_CASSANDRA_HOSTS": "a, b,"}).contact_points == ["a", "b"]


def test_a_bad_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="PARLEY_KAFKA_PORT"):
        from_env(LocalInfraSettings, {"PARLEY_KAFKA_PORT": "ninety"})


def test_topic_prefix_applies_to_every_name() -> None:
    assert from_env(KafkaSettings, {"PARLEY_TOPIC_PREFIX": "t1."}).topic("chat.events") == "t1.chat.events"


def test_every_setting_is_documented() -> None:
    for cls in (KafkaSettings, CassandraSettings, LocalInfraSettings):
        for name, _, doc in describe(cls):
            assert name.startswith("PARLEY_") and doc


def test_parley_settings_lists_every_variable_the_services_read() -> None:
    """`parley settings` is "every setting": a PARLEY_ variable read anywhere below the tools is in it."""
    import ast
    import re

    from tools.cli import _settings_by_service

    root = Path(__file__).resolve().parents[3]
    listed = {name for _, cls in _settings_by_service() for name, _, _ in describe(cls)}
    read = set()
    for package in ("parley", "infra", "workers", "streams", "gateway", "edge"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"PARLEY_[A-Z0-9_]+", node.value):
                    read.add(node.value)
    from parley.settings import RETIRED

    assert read - listed - set(RETIRED) == set()
