"""Avro schema-resolution rules, to tell whether one schema can read another's data.

``incompatibilities(writer, reader)`` lists why data written with ``writer``
cannot be read with ``reader`` (empty: it can). Backward compatibility (new
readers, old data) is ``incompatibilities(old, new)``; forward compatibility
(old readers, new data) is ``incompatibilities(new, old)``. It covers the
subset of Avro that ``records.py`` emits: records, primitives, arrays and
``["null", T]`` unions.
"""

from __future__ import annotations

from typing import Any

# Writer type → reader types it may be promoted to (Avro specification, "Schema Resolution").
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def incompatibilities(writer: Any, reader: Any, path: str = "") -> list[str]:
    return _check(writer, reader, path or _name(reader), {}, {})


def _name(schema: Any) -> str:
    return schema.get("name", "?") if isinstance(schema, dict) else str(schema)


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    """Replace a reference to an earlier named record by its definition; remember definitions."""
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, str) and schema.split(".")[-1] in named:
        return named[schema.split(".")[-1]]
    if isinstance(schema, dict) and schema.get("type") == "record":
        named[schema["name"]] = schema
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = schema
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return schema["type"]
    return schema


def _check(writer: Any, reader: Any, path: str, wnamed: dict[str, Any], rnamed: dict[str, Any]) -> list[str]:
    writer, reader = _resolve(writer, wnamed), _resolve(reader, rnamed)
    wk, rk = _kind(writer), _kind(reader)
    if wk == "union":
        # Every branch the writer may have used must be readable.
        out = []
        for branch in writer:
            out += _check(branch, reader, path, wnamed, rnamed)
        return out
    if rk == "union":
        for branch in reader:
            if not _check(writer, branch, path, dict(wnamed), dict(rnamed)):
                _check(writer, branch, path, wnamed, rnamed)  # record the named types it defines
                return []
        return [f"{path}: {wk} matches no branch of the reader's union"]
    if wk == "record" and rk == "record":
        return _record(writer, reader, path, wnamed, rnamed)
    if wk == "array" and rk == "array":
        return _check(writer["items"], reader["items"], f"{path}[]", wnamed, rnamed)
    if wk == rk or rk in _PROMOTIONS.get(wk, set()):
        return []
    return [f"{path}: written as {wk}, read as {rk}"]


def _record(writer: dict, reader: dict, path: str, wnamed: dict[str, Any], rnamed: dict[str, Any]) -> list[str]:
    if writer["name"] != reader["name"]:
        return [f"{path}: record {writer['name']} read as {reader['name']}"]
    written = {f["name"]: f for f in writer["fields"]}
    out = []
    for field in reader["fields"]:
        where = f"{path}.{field['name']}"
        if field["name"] in written:
            out += _check(written[field["name"]]["type"], field["type"], where, wnamed, rnamed)
        elif "default" not in field:
            out.append(f"{where}: the reader needs it, the writer lacks it, and it has no default")
    return out
