from __future__ import annotations

from pathlib import Path

import pytest
from cassandra import ReadFailure

from parley import migrate as migrate_module
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


class _Session:
    """Answers each execute from ``answers`` in turn (an exception is raised); records agreement waits."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.waits = 0
        self.cluster = self
        self.control_connection = self

    def execute(self, statement: str, params: tuple = (), timeout: float = 0) -> object:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def wait_for_schema_agreement(self, wait_time: float) -> bool:
        self.waits += 1
        return True


def _failure(code: int) -> ReadFailure:
    return ReadFailure("replica failed", consistency=6, required_responses=2, received_responses=1,
                       failures=1, error_code_map={"127.0.1.2": code})


def test_a_replica_that_has_not_applied_a_new_table_yet_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrate_module.time, "sleep", lambda s: None)
    session = _Session(_failure(0x0003), _failure(0x0003), ["row"])
    assert migrate_module._on_new_table(session, "SELECT version FROM schema_migrations") == ["row"]
    assert session.waits == 2


def test_any_other_replica_failure_is_raised_at_once() -> None:
    session = _Session(_failure(0x0001), ["row"])  # READ_TOO_MANY_TOMBSTONES: asking again cannot help
    with pytest.raises(ReadFailure):
        migrate_module._on_new_table(session, "SELECT version FROM schema_migrations")
    assert session.waits == 0
