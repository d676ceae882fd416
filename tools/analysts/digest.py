"""A row-by-row digest of the projected tables, to say whether two keyspaces hold the same rows.

Each row is rendered canonically (columns sorted by name, values as plain JSON), hashed; a
table's digest is the hash of its sorted row hashes, so it does not depend on the order the
database returns rows in. ``diff`` names the first rows that differ, for a readable failure.
A sealed cell is read as a hash of its text, opened at its place: a cell sealed in the first
format (before values were bound to their place) and its rebuild in the current one hold the
same text under different ciphertexts.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from schemas import sealing
from streams.projection import ROW_IDS, SEALED_CELLS

#: The tables that are a projection of the log (DESIGN.md §6): rebuild writes them, the digest compares them.
PROJECTED: tuple[str, ...] = ("conversations", "conversations_by_user", "messages", "summaries", "user_memory")


def canonical(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [canonical(v) for v in value]
        return sorted(items, key=json.dumps) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items())}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # the driver's Date, Duration…


def row_key(row: dict[str, Any]) -> str:
    return json.dumps({k: canonical(v) for k, v in sorted(row.items())}, sort_keys=True, ensure_ascii=False)


def row_hash(row: dict[str, Any]) -> str:
    return hashlib.sha256(row_key(row).encode()).hexdigest()


@dataclass(frozen=True)
class TableDigest:
    table: str
    rows: int
    digest: str


def digest(table: str, rows: list[dict[str, Any]]) -> TableDigest:
    hashes = sorted(row_hash(r) for r in rows)
    return TableDigest(table, len(rows), hashlib.sha256("".join(hashes).encode()).hexdigest())


def diff(a: list[dict[str, Any]], b: list[dict[str, Any]], limit: int = 3) -> list[str]:
    """Up to ``limit`` rows of either side missing from the other, rendered canonically."""
    ka, kb = {row_key(r) for r in a}, {row_key(r) for r in b}
    only_a = sorted(ka - kb)[:limit]
    only_b = sorted(kb - ka)[:limit]
    return [f"only in the first: {r}" for r in only_a] + [f"only in the second: {r}" for r in only_b]


#: The sealed cells of each projected table and the column naming their row (streams/memory.py for memory).
_SEALED = {t: (columns, ROW_IDS[t]) for t, columns in SEALED_CELLS.items()} | {"user_memory": (frozenset({"text"}), "fact_id")}


def opened(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each sealed cell replaced by a hash of its text (opened at the cell's place)."""
    columns, row_id = _SEALED.get(table, (frozenset(), ""))
    out = dict(row)
    for column in columns:
        value = row.get(column)
        if sealing.is_sealed(value):
            text = sealing.open_text(value, at=sealing.cell_at(table, column, row[row_id])) or ""
            out[column] = "sealed text " + hashlib.sha256(text.encode()).hexdigest()
    return out


def read_rows(session: Any, keyspace: str, table: str) -> list[dict[str, Any]]:
    """Every row of ``keyspace.table`` as a dict, sealed cells as ``opened`` (a full scan: for analysts and
    tests, not services)."""
    result = session.execute(f"SELECT * FROM {keyspace}.{table}", timeout=120)
    return [opened(table, dict(zip(result.column_names, row))) for row in result]


def keyspace_digest(session: Any, keyspace: str, tables: tuple[str, ...] = PROJECTED) -> dict[str, TableDigest]:
    return {t: digest(t, read_rows(session, keyspace, t)) for t in tables}
