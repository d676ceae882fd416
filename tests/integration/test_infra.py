"""infra/local against the real processes: a second start reuses them; a taken port is a clear error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from infra.local import jvm, stack
from infra.local.settings import LocalInfraSettings


def test_starting_twice_reuses_the_running_services(infra: LocalInfraSettings) -> None:
    before = {s.name: s.pid for s in stack.status(infra)}
    states = stack.up(infra, echo=lambda s: None)
    assert all(s.reused for s in states)
    assert {s.name: s.pid for s in states} == before
    assert all(pid for pid in before.values())


@pytest.mark.parametrize("name", ["kafka", "cassandra"])
def test_a_port_taken_by_another_process_is_a_clear_error(infra: LocalInfraSettings, tmp_path: Path, name: str) -> None:
    # Another checkout (another data dir) on the same ports: the running services are strangers to it.
    other = replace(infra, data_dir=tmp_path / "data")
    with pytest.raises(jvm.InfraError, match="in use by a process Parley did not start") as caught:
        stack.up(other, echo=lambda s: None, only=(name,))
    assert "PARLEY_" in str(caught.value)
    assert not (other.data_dir / name / f"{name}.pid").exists()
