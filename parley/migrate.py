"""Versioned, idempotent CQL migrations (``parley db migrate``).

Files ``schemas/cql/NNNN_name.cql`` apply in order. Applied versions are
recorded with a checksum in ``<keyspace>.schema_migrations``; a re-run skips
them, and a changed file that was already applied is an error (add a new
migration instead). Statements use IF NOT EXISTS, so a run interrupted half way
can simply be repeated.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cassandra import CoordinationFailure
from cassandra.cluster import Session

from parley.errors import MigrationError

CQL_DIR = Path(__file__).resolve().parent.parent / "schemas" / "cql"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.cql$")
_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
#: Seconds a schema statement may take (the driver's default is 10).
DDL_TIMEOUT_S = 60
#: Cassandra's RequestFailureReason of a replica that has not applied a table's schema yet.
_INCOMPATIBLE_SCHEMA = 0x0003


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    checksum: str


def split_statements(text: str) -> list[str]:
    """CQL text as statements: `--` comments dropped, split on `;` at line ends."""
    lines = [line.split("--", 1)[0].rstrip() for line in text.splitlines()]
    body = "\n".join(line for line in lines if line.strip())
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", body) if s.strip()]


def load(cql_dir: Path = CQL_DIR) -> list[Migration]:
    out = []
    for path in sorted(cql_dir.glob("*.cql")):
        m = _NAME.match(path.name)
        if not m:
            raise MigrationError(f"{path.name}: migration files are named NNNN_name.cql")
        text = path.read_text()
        out.append(
            Migration(int(m[1]), m[2], tuple(split_statements(text)), hashlib.sha256(text.encode()).hexdigest())
        )
    versions = [m.version for m in out]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {cql_dir}")
    return out


def _ddl(session: Session, statement: str) -> None:
    """A schema change, once every live node has it: the next statement may run on any of them. The driver
    waits 10 s for their agreement and then goes on regardless; a cluster under load takes longer."""
    result = session.execute(statement, timeout=DDL_TIMEOUT_S)
    if result.response_future.is_schema_agreed:
        return
    if not session.cluster.control_connection.wait_for_schema_agreement(wait_time=DDL_TIMEOUT_S):
        raise MigrationError(f"the nodes did not agree on the schema within {DDL_TIMEOUT_S}s after: {statement[:80]}")


def _on_new_table(session: Session, statement: str, params: tuple = ()) -> object:
    """A statement on a table this run may just have made. The driver's agreement check reads the peers'
    schema versions as gossip reports them and skips nodes it holds down, so a replica can still answer
    INCOMPATIBLE_SCHEMA (it has not applied the table yet) after agreement was seen: asked again until it
    has, for at most DDL_TIMEOUT_S. Any other failure is raised at once."""
    deadline = time.monotonic() + DDL_TIMEOUT_S
    while True:
        try:
            return session.execute(statement, params, timeout=DDL_TIMEOUT_S)
        except CoordinationFailure as exc:
            reasons = set((exc.error_code_map or {}).values())
            if reasons != {_INCOMPATIBLE_SCHEMA} or time.monotonic() >= deadline:
                raise
            session.cluster.control_connection.wait_for_schema_agreement(wait_time=5)
            time.sleep(0.5)


def migrate(session: Session, keyspace: str, replication: str, cql_dir: Path = CQL_DIR) -> list[Migration]:
    """Apply pending migrations; returns those applied by this call."""
    if not _IDENT.match(keyspace):
        raise MigrationError(f"keyspace name {keyspace!r} is not a plain identifier (PARLEY_KEYSPACE)")
    _ddl(session, f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication}")
    session.set_keyspace(keyspace)
    _ddl(session, "CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY, name text, checksum text, applied_at timestamp)")
    rows = _on_new_table(session, "SELECT version, name, checksum FROM schema_migrations")
    applied = {row.version: row for row in rows}
    done = []
    for mig in load(cql_dir):
        row = applied.get(mig.version)
        if row is not None:
            if row.checksum != mig.checksum:
                raise MigrationError(
                    f"migration {mig.version:04d}_{mig.name} changed after it was applied; "
                    "never edit an applied migration, add a new one"
                )
            continue
        for statement in mig.statements:
            _ddl(session, statement)
        _on_new_table(
            session,
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (%s, %s, %s, %s)",
            (mig.version, mig.name, mig.checksum, datetime.now(timezone.utc)),
        )
        done.append(mig)
    return done
