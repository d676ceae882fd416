"""The supervisor stops a stack in waves: front doors, then processors and workers together, engines last."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tools.supervisor import Supervisor
from tools.topology import CONTEXT, ENGINE, GATEWAY, ROUTER, WORKER_SMALL


def test_the_gateway_leaves_before_the_rest_are_told_and_the_engine_after_them(tmp_path: Path) -> None:
    services = [
        replace(s, module_args=("tests.unit.tools.term_recorder", s.name), health_url=None)
        for s in (ENGINE, WORKER_SMALL, CONTEXT, ROUTER, GATEWAY)
    ]
    supervisor = Supervisor(tmp_path / "logs", {"RECORD_DIR": str(tmp_path)})
    supervisor.start_all(services, echo=lambda s: None)
    supervisor.stop_all()
    told, left = {}, {}
    for s in services:
        told[s.name], left[s.name] = map(float, (tmp_path / s.name).read_text().split())
    middle = ("worker-small", "context", "router")
    assert all(left["gateway"] <= told[m] for m in middle)
    assert all(left[m] <= told["engine"] for m in middle)
    # One wave is told at once: each leaves after the others were told, not one after another.
    assert max(told[m] for m in middle) < min(left[m] for m in middle)
    assert supervisor.children == []
