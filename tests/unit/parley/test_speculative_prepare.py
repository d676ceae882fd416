"""A statement is prepared speculatively: a node that hangs (paused: sockets open, nothing answers) does
not hold the statement's first use for the driver's request timeout, once per attempt."""

from __future__ import annotations

import threading

import pytest
from cassandra import InvalidRequest, OperationTimedOut

from parley import cassandra as pc


class Nodes:
    """Each prepare goes to the next node of a round robin; node 0 hangs until released."""

    def __init__(self, failing: type[Exception] | None = None) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.failing = failing

    def prepare(self, text: str) -> str:
        node, self.calls = self.calls % 3, self.calls + 1
        if self.failing is not None:
            raise self.failing("no")
        if node == 0:
            if not self.release.wait(30):
                raise OperationTimedOut("node 0")
            return "from the hung node"
        return f"prepared by node {node}"


async def test_a_hung_node_is_passed_over_for_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pc, "SPECULATE_AFTER_S", 0.05)
    nodes = Nodes()
    try:
        assert await pc.prepare(nodes, "SELECT 1") == "prepared by node 1"  # type: ignore[arg-type]
        assert nodes.calls == 2  # one more attempt, not three
    finally:
        nodes.release.set()


async def test_a_statement_a_node_refuses_is_not_asked_again() -> None:
    nodes = Nodes(failing=InvalidRequest)
    with pytest.raises(InvalidRequest):
        await pc.prepare(nodes, "SELECT nonsense")  # type: ignore[arg-type]
    assert nodes.calls == 1


async def test_timeouts_everywhere_raise_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pc, "SPECULATE_AFTER_S", 0.01)
    nodes = Nodes(failing=OperationTimedOut)
    with pytest.raises(OperationTimedOut):
        await pc.prepare(nodes, "SELECT 1")  # type: ignore[arg-type]
    assert nodes.calls == 3
