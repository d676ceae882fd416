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
from schemas.events import Event, MemoryFact, MemoryUpdated, ToolCall, ToolCallCleared, ToolCallFinished, ToolCallStarted
from workers.tool_executor import Abandoned, Executor, Found
from workers.tool_runners import ToolResult

CHARGE = ToolSpec("charge_card", "", {"type": "object"}, "http", url="http://127.0.0.1:9/")
ADD = ToolSpec("add_expense", "", {"type": "object"}, "http", url="http://127.0.0.1:9/", idempotent=True)
REMEMBER = ToolSpec("remember", "", {"type": "object"}, "memory", idempotent=True)


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

    def __init__(self, tool: Tool, started_before: bool = False, memory: Any = None) -> None:
        specs = (CHARGE, ADD, REMEMBER)
        super().__init__(KafkaSettings(bootstrap="127.0.0.1:9"), ToolConfig({s.name: s for s in specs}), "test")
        self._runners = {CHARGE.name: tool, ADD.name: tool}  # type: ignore[dict-item]
        if memory is not None:
            self._runners[REMEMBER.name] = memory
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


class Memory:
    """A memory built-in: each run makes a new snapshot (its own time), so a second run would show."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.users: list[str] = []
        self.fail = fail

    async def run_for(self, user_id: str, arguments: dict[str, Any], key: str) -> ToolResult:
        self.users.append(user_id)
        if self.fail is not None:
            raise self.fail
        run = len(self.users)
        event = MemoryUpdated(user_id=user_id, facts=[MemoryFact(fact_id=f"f{run}", text=arguments["fact"])])
        return ToolResult("ok", "Remembered.", events=(event,))


def remembered(arguments: str = '{"fact": "likes tea"}') -> ToolCallCleared:
    return ToolCallCleared(
        event_id="e-cleared", conversation_id="c", user_id="u", request_id="r",
        call=ToolCall(id="call_1", name=REMEMBER.name, arguments=arguments),
    )


def test_a_memory_change_commits_in_the_transaction_of_its_finish_for_the_calling_user() -> None:
    tool = Memory()
    executor = Scripted(Tool(), memory=tool)
    transactions: list[list[Event]] = []
    transact = executor._transact
    executor._transact = lambda events, *a, **k: (transactions.append(list(events)), transact(events, *a, **k))[1]  # type: ignore[method-assign]
    asyncio.run(handle_until_done(executor, remembered()))
    assert tool.users == ["u"]
    assert [[type(e).__name__ for e in t] for t in transactions] == [["ToolCallStarted"], ["ToolCallFinished", "MemoryUpdated"]]
    assert executor.offsets == [7, 8]


def test_a_failed_finish_commits_the_same_memory_snapshot_without_running_the_tool_again() -> None:
    tool = Memory()
    executor = Scripted(Tool(), memory=tool)
    executor.script = ["ok", "fail", "fail"]  # Started commits; the finish and its snapshot fail twice
    assert asyncio.run(handle_until_done(executor, remembered())) == 3
    assert tool.users == ["u"]
    (snapshot,) = [e for e in executor.log if isinstance(e, MemoryUpdated)]
    assert [f.fact_id for f in snapshot.facts] == ["f1"] and executor._mine == {}


def test_a_memory_call_that_fails_commits_no_change() -> None:
    executor = Scripted(Tool(), memory=Memory(fail=RuntimeError("boom")))
    asyncio.run(handle_until_done(executor, remembered()))
    assert [(f.outcome, f.error) for f in finished(executor)] == [("error", "the tool failed (RuntimeError)")]
    assert not [e for e in executor.log if isinstance(e, MemoryUpdated)]


def test_a_memory_tool_without_its_runner_here_ends_as_an_error_naming_the_entry_point() -> None:
    executor = Scripted(Tool())  # as python -m workers.tool_executor: no factories for the users' data
    asyncio.run(handle_until_done(executor, remembered()))
    (done,) = finished(executor)
    assert done.outcome == "error" and "streams.tool_executor" in done.error


@pytest.mark.parametrize("arguments", ['"likes tea"', "[1]", "null"])
def test_arguments_that_are_not_an_object_end_as_an_error_without_calling(arguments: str) -> None:
    tool = Memory()
    executor = Scripted(Tool(), memory=tool)
    asyncio.run(handle_until_done(executor, remembered(arguments)))
    assert tool.users == [] and [f.outcome for f in finished(executor)] == ["error"]


# ------------------------------------------------------------------ an organisation's own tools

LEDGER = ToolSpec("ledger_add", "", {"type": "object"}, "mcp", url="http://127.0.0.1:9/mcp", remote="add", guarded=True)


def org_cleared(org_id: str) -> ToolCallCleared:
    event = cleared(LEDGER)
    return ToolCallCleared(
        event_id=event.event_id, conversation_id="c", user_id="u", request_id="r", call=event.call, org_id=org_id,
    )


def test_an_organisations_tool_is_found_by_the_calls_organisation_and_reached_through_the_guard() -> None:
    asked: list[tuple[str, str]] = []
    down = False

    async def org_specs(org_id: str, name: str) -> ToolSpec | None:
        asked.append((org_id, name))
        if down:
            raise ConnectionError("Cassandra is away")
        return LEDGER if org_id == "acme" else None

    executor = Scripted(Tool())
    executor._org_specs = org_specs
    assert asyncio.run(handle_until_done(executor, org_cleared("acme"))) == 1
    # Its server is on loopback, which the operator did not open: refused before anything is sent.
    [done] = finished(executor)
    assert (done.outcome, done.error) == ("error", "the MCP server's address is refused: the address is loopback")
    other = Scripted(Tool())
    other._org_specs = org_specs
    asyncio.run(handle_until_done(other, org_cleared("globex")))  # another organisation's member: no such tool
    assert [(f.outcome, f.error) for f in finished(other)] == [("error", "the tool is no longer registered")]
    assert asked == [("acme", "ledger_add"), ("globex", "ledger_add")]
    down = True
    third = Scripted(Tool())
    third._org_specs = org_specs
    with pytest.raises(Abandoned):  # the store unreadable: the record is read again, never answered on a guess
        asyncio.run(third._execute(org_cleared("acme"), 0, 7))
    assert third.log == []
