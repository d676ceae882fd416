"""docs/design.md names the topics, events and routes that exist, and every one that exists.

The design document is the contracts' home: a topic, an event type or an HTTP
route added, renamed or removed without it fails here, in both directions.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from schemas.catalog import POOLS, TOPICS, dlq_name
from schemas.events import EVENT_TYPES

ROOT = Path(__file__).resolve().parents[2]
DESIGN = (ROOT / "docs" / "design.md").read_text()
OPENAPI = yaml.safe_load((ROOT / "schemas" / "openapi.yaml").read_text())


def section(number: int) -> str:
    start = DESIGN.index(f"\n## {number}. ")
    end = DESIGN.find("\n## ", start + 1)
    return DESIGN[start : end if end >= 0 else None]


def topic_rows() -> dict[str, set[str]]:
    """Topic name → event type names, as §3's table says (``<pool>`` and ``<topic>.dlq`` expanded)."""
    rows: dict[str, set[str]] = {}
    main = [name for name in TOPICS if not name.endswith(".dlq")]
    for line in section(3).splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = re.match(r"`([^`]+)`", cells[0]).group(1)  # type: ignore[union-attr]
        events = {e.strip() for e in re.sub(r"\s*\([^)]*\)", "", cells[2]).split(",")} - {""}
        names = {name}
        if "<pool>" in name:
            names = {name.replace("<pool>", pool) for pool in POOLS}
        elif name == "<topic>.dlq":
            names = {dlq_name(t) for t in main if dlq_name(t) in TOPICS}
        for n in names:
            rows[n] = events
    return rows


def expand(patterns: set[str]) -> set[str]:
    """Event names, ``Prefix*`` standing for every event type that starts with it."""
    out = set()
    for p in patterns:
        out |= {e for e in EVENT_TYPES if e.startswith(p[:-1])} if p.endswith("*") else {p}
    return out


def test_the_topics_table_is_the_catalog_with_each_topics_events_and_partitions() -> None:
    rows = topic_rows()
    assert set(rows) == set(TOPICS)
    for name, topic in TOPICS.items():
        assert expand(rows[name]) == {e.__name__ for e in topic.events}, name
    for line in section(3).splitlines():
        if line.startswith("| `") and "<" not in line.split("|")[1]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert int(cells[4]) == TOPICS[cells[0].strip("`")].partitions, cells[0]


def test_every_event_type_is_named_and_every_name_is_an_event_type() -> None:
    named = set().union(*(expand(events) for events in topic_rows().values()))
    assert named == set(EVENT_TYPES)


def test_the_http_section_names_the_routes_the_openapi_document_serves() -> None:
    def shape(path: str) -> str:
        return re.sub(r"\{[^}]+\}", "{}", path)

    named = set()
    for methods, path in re.findall(r"`((?:GET|POST|PUT|DELETE|PATCH)(?:/(?:GET|POST|PUT|DELETE|PATCH))*) (/[^\s`?]+)", section(7)):
        for method in methods.split("/"):
            named.add((method.lower(), shape(path)))
    documented = {
        (method, shape(path))
        for path, ops in OPENAPI["paths"].items()
        for method in ops
        if method != "parameters"
    }
    assert named == documented
