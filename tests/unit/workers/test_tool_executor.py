"""The executor's steps when Kafka fails between them (workers/tool_executor.py ``_execute``).

The log and the tool are scripted here (the broker's side of a transaction, and what a lookup finds);
Kafka itself is exercised by tests/e2e/test_tools.py (the executor killed mid-call) and bench.chaos
--tools. What is checked: a failed step abandons the record instead of retrying without polling (a
member that never polls never learns it lost its partitions: bench.chaos --tools seed 61 saw one retry a
fenced transaction for two minutes), and handling the record again neither runs the tool twice nor
reports a call it ran itself as unknown.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from parley.settings import KafkaSettings
from parley.tool_registry import ToolConfig, ToolSpec
from schemas.events import Event, ToolCall, ToolCallCleared, ToolCallFinished, ToolCallStarted
from workers.tool_executor import Abandoned, Executor, Found
from workers.tool_runners import ToolResult

CHARGE = ToolSpec("charge_card", "", {"type": "object"}, "http", url="http://127.0.0.1:9/")
ADD = ToolSpec("add_expense", "", {"type": "object"}, "http", url="http://127.0.0.1:9/", idempotent=True)


def cleared(spec: ToolSpec = CHARGE) -> ToolCallCleared:
    return ToolCallCleared(
        event_id="e-cleared", conversation_id="c", user_id="u", request_id="r",
        call=ToolCall(id="call_1", name=spec.name, arguments='{"amount": 3}'),
    )


class Tool:
    def __init__(self) -> None:
        self.requests = 0

    async def run(self, arguments: dict[str, Any], key: str) -> ToolResult:
        self.requests += 1
        return ToolResult("ok", f"charged {arguments['amount']}")


class Scripted(Executor):
    """An executor whose Kafka thread is a script: ``fail`` lists, per step, how the next transactions end
    ('ok', 'fail' before committing, 'lost' committed but the answer lost)."""

    def __init__(self, tool: Tool, started_before: bool = False) -> None:
        super().__init__(KafkaSettings(bootstrap="127.0.0.1:9"), ToolConfig({s.name: s for s in (CHARGE, ADD)}), "test")
        self._runners = {CHARGE.name: tool, ADD.name: tool}  # type: ignore[dict-item]
        self.log: list[Event] = []
        self.offsets: list[int] = []
        self.script: list[str] = []
        self.started_before = started_before

    def _look_up(self, event: ToolCallCleared) -> Found:
        return Found(
            self.started_before or any(isinstance(e, ToolCallStarted) for e in self.log),
            any(isinstance(e, ToolCallFinished) for e in self.log),
        )

    def _transact(self, events: list[Event], partition: int, position: int, raw: Any = None) -> None:
        how = self.script.pop(0) if self.script else "ok"
        if how == "fail":
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        self.log += events
        self.offsets.append(position)
        if how == "lost":
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


async def handle_until_done(executor: Scripted, event: ToolCallCleared) -> int:
    """The record handled until a try ends without abandoning it, as the poll loop does; the tries."""
    for tries in range(1, 10):
        try:
            await executor._execute(event, 0, 7)
            return tries
        except Abandoned:
            continue
    raise AssertionError("never done")


def finished(executor: Scripted) -> list[ToolCallFinished]:
    return [e for e in executor.log if isinstance(e, ToolCallFinished)]


def test_a_call_runs_once_with_started_at_the_record_and_finished_past_it() -> None:
    tool = Tool()
    executor = Scripted(tool)
    assert asyncio.run(handle_until_done(executor, cleared())) == 1
    assert tool.requests == 1 and executor.offsets == [7, 8]
    assert [f.outcome for f in finished(executor)] == ["ok"]


def test_a_failed_step_abandons_the_record_instead_of_retrying_in_place() -> None:
    executor = Scripted(Tool())
    executor.script = ["fail"]
    with pytest.raises(Abandoned):
        asyncio.run(executor._execute(cleared(), 0, 7))
    assert executor.log == []


def test_a_finish_that_failed_is_finished_with_the_result_held_not_run_again_nor_unknown() -> None:
    tool = Tool()
    executor = Scripted(tool)
    executor.script = ["ok", "fail", "fail"]  # Started commits; Finished fails twice
    assert asyncio.run(handle_until_done(executor, cleared())) == 3
    assert tool.requests == 1
    assert [(f.outcome, f.result) for f in finished(executor)] == [("ok", "charged 3")]
    assert executor._mine == {}


def test_a_start_whose_commit_answer_was_lost_is_run_once_when_handled_again() -> None:
    tool = Tool()
    executor = Scripted(tool)
    executor.script = ["lost"]  # Started committed, but the executor was not told
    assert asyncio.run(handle_until_done(executor, cleared())) == 2
    assert tool.requests == 1
    assert [f.outcome for f in finished(executor)] == ["ok"]


def test_a_call_an_earlier_owner_started_ends_unknown_and_is_never_run() -> None:
    tool = Tool()
    executor = Scripted(tool, started_before=True)
    asyncio.run(handle_until_done(executor, cleared()))
    assert tool.requests == 0
    assert [f.outcome for f in finished(executor)] == ["unknown"]


def test_an_idempotent_call_an_earlier_owner_started_is_asked_again_with_its_key() -> None:
    tool = Tool()
    executor = Scripted(tool, started_before=True)
    asyncio.run(handle_until_done(executor, cleared(ADD)))
    assert tool.requests == 1
    assert [f.outcome for f in finished(executor)] == ["ok"]


def test_a_finished_call_is_skipped_with_its_offset_committed() -> None:
    tool = Tool()
    executor = Scripted(tool)
    executor.log = [ToolCallFinished(event_id="f", conversation_id="c", user_id="u", request_id="r", call_id="call_1",
                                     name="charge_card", outcome="ok")]
    asyncio.run(handle_until_done(executor, cleared()))
    assert tool.requests == 0 and executor.offsets == [8]


def test_arguments_that_are_not_json_end_the_call_as_an_error_without_calling() -> None:
    tool = Tool()
    executor = Scripted(tool)
    event = cleared()
    event = ToolCallCleared(**{**event.__dict__, "call": ToolCall(id="call_1", name="charge_card", arguments="{no")})
    asyncio.run(handle_until_done(executor, event))
    assert tool.requests == 0
    assert [f.outcome for f in finished(executor)] == ["error"]
