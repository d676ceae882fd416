from __future__ import annotations

from pathlib import Path

import pytest

from parley.errors import MigrationError
from parley.migrate import load, split_statements


def test_statements_split_on_semicolons_at_line_ends_without_comments() -> None:
    text = "-- header\nCREATE TABLE a (x int PRIMARY KEY); -- trailing\n\nCREATE TABLE b (\n  y text -- why\n);\n"
    assert split_statements(text) == ["CREATE TABLE a (x int PRIMARY KEY)", "CREATE TABLE b (\n  y text\n)"]


def test_shipped_migrations_load_in_order_and_are_idempotent_statements() -> None:
    migrations = load()
    assert [m.version for m in migrations] == sorted(m.version for m in migrations)
    for m in migrations:
        for statement in m.statements:
            upper = statement.upper()
            guard = "IF EXISTS" if upper.startswith("DROP") else "IF NOT EXISTS"
            assert guard in upper, statement.splitlines()[0]


def test_badly_named_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "initial.cql").write_text("CREATE TABLE IF NOT EXISTS t (x int PRIMARY KEY);")
    with pytest.raises(MigrationError, match="NNNN_name"):
        load(tmp_path)
