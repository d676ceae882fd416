"""Keep ``schemas/avro/*.avsc`` equal to the event types, and keep old versions.

``parley schemas write`` calls ``write()``: an ``.avsc`` whose content changed
is first copied to ``avro/released/<Name>.<fingerprint>.avsc``, so the codec can
still read events written under it and the compatibility test can check the new
version against it.
"""

from __future__ import annotations

import json
from pathlib import Path

from schemas.codec import AVRO_DIR, RELEASED_DIR, fingerprint
from schemas.events import EVENT_TYPES
from schemas.records import avro_schema


def render(name: str) -> str:
    return json.dumps(avro_schema(EVENT_TYPES[name]), indent=2, ensure_ascii=False) + "\n"


def drift(avro_dir: Path = AVRO_DIR) -> list[str]:
    """Event names whose committed ``.avsc`` is missing or differs from the Python type."""
    out = []
    for name in sorted(EVENT_TYPES):
        path = avro_dir / f"{name}.avsc"
        if not path.exists() or path.read_text() != render(name):
            out.append(name)
    return out


def write(avro_dir: Path = AVRO_DIR, released_dir: Path = RELEASED_DIR) -> list[str]:
    """Regenerate the ``.avsc`` files; returns the names that changed."""
    released_dir.mkdir(parents=True, exist_ok=True)
    changed = drift(avro_dir)
    for name in changed:
        path = avro_dir / f"{name}.avsc"
        if path.exists():
            old = json.loads(path.read_text())
            keep = released_dir / f"{name}.{fingerprint(old).hex()}.avsc"
            if not keep.exists() and fingerprint(old) != fingerprint(avro_schema(EVENT_TYPES[name])):
                keep.write_text(path.read_text())
        path.write_text(render(name))
    return changed
