"""The audit's pure core: the log's projection against rows, and the turn invariants.

"Cassandra" here is the materializer's loop applied to a last-write-wins table
(tests/unit/streams/test_projection.py), read back the way the driver hands
rows: dicts of every column, times at millisecond precision.
"""

from __future__ import annotations

from schemas import sealing

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from schemas import events as ev
from streams.checkpoint import Checkpoint
from streams.projection import Write
from tests.unit.streams.test_projection import Tables, run, store
from tests.unit.streams.test_tree import CID, U, conversation_log
from tools.audit import audit, norm, repeated_opening


def read_back(tables: Tables) -> dict[str, list[dict[str, Any]]]:
    """Rows as the driver returns them: naive UTC datetimes truncated to milliseconds."""
    out: dict[str, list[dict[str, Any]]] = {}
    for (table, key), cells in tables.items():
        row = {**dict(key), **{c: v for c, (_, v) in cells.items()}}
        for c, v in row.items():
            if isinstance(v, datetime):
                row[c] = v.replace(tzinfo=None, microsecond=v.microsecond // 1000 * 1000)
        out.setdefault(table, []).append(row)
    return out


def materialized(log: list[ev.Event], extra: list[Write] = ()) -> dict[str, list[dict[str, Any]]]:
    return read_back(store([*run(log)[0], *extra]))


def checkpoint(request_id: str, text: str, at: int) -> Write:
    return Checkpoint(CID, request_id, text, 3, at).write(sealing.sealer())


def test_rows_written_by_the_materializer_agree_with_the_log() -> None:
    log, ids = conversation_log()
    report = audit(log, materialized(log))
    assert report.ok() and report.row_problems == 0
    assert report.rows_expected == report.rows_found == 1 + 1 + 6  # conversation, by_user, six messages
    assert report.turns.requested == 3
    assert report.turns.finished == {"stop": 1, "failed": 1}
    assert report.turns.in_flight == [ids["r2b"]]
    assert not report.ok(lost_ok=False), "after quiescence a turn in flight is a lost one"


def test_events_appended_twice_are_not_duplicates() -> None:
    log, _ = conversation_log()
    replayed = log[:4] + log[1:4] + log[4:] + log[5:7]  # a producer retry and a processor re-delivery
    report = audit(replayed, materialized(replayed))
    assert report.ok() and report.duplicates == 0
    assert report.turns.reappended == 2


def test_missing_extra_and_differing_rows_are_reported() -> None:
    log, ids = conversation_log()
    tables = materialized(log)
    tables["messages"] = [r for r in tables["messages"] if r["message_id"] != uuid.UUID(ids["m1"])]
    stray = {"conversation_id": uuid.UUID(CID), "message_id": uuid.uuid4(), "role": "assistant", "content": "?"}
    tables["messages"].append(stray)
    for row in tables["conversations"]:
        row["title"] = "not the log's"
    report = audit(log, tables)
    assert not report.ok()
    assert report.missing == [("messages", (CID, ids["m1"]))]
    assert report.extra == [("messages", (CID, str(stray["message_id"])))]
    assert [(d.key[0], d.column) for d in report.differing] == [("conversations", "title")]
    assert report.row_problems == 3


def test_a_reply_in_flight_may_hold_checkpointed_text_but_a_finished_one_may_not() -> None:
    log, ids = conversation_log()
    late = log[-1].occurred_at + 10
    streaming = checkpoint(ids["r2b"], "partial te", late)
    assert audit(log, materialized(log, [streaming])).ok()

    # A checkpoint newer than the completion (a second generation after the reply ended) overwrites it.
    stale = checkpoint(ids["r1"], "hi! hi!", late)
    report = audit(log, materialized(log, [stale]))
    assert {(d.key[1][1], d.column) for d in report.differing} == {(ids["r1"], "content"), (ids["r1"], "tokens"), (ids["r1"], "updated_at")}
    # An older one (the normal case: chunks come before their completion) is overwritten by it.
    early = checkpoint(ids["r1"], "h", log[3].occurred_at - 1)
    assert audit(log, materialized(log, [early])).ok()


def test_two_replies_to_one_client_action_are_a_duplicate() -> None:
    log, ids = conversation_log()
    again = replace(log[2], request_id=str(uuid.uuid4()), occurred_at=log[-1].occurred_at + 1)
    report = audit([*log, again], materialized([*log, again]))
    assert report.turns.duplicate_replies == [(CID, "c1")]
    assert not report.ok()


def test_two_different_completions_of_one_request_conflict() -> None:
    log, ids = conversation_log()
    second = replace(log[3], content="something else", occurred_at=log[-1].occurred_at + 1)
    report = audit([*log, second], materialized([*log, second]))
    assert report.row_problems == 0  # the rows follow the log: the newer completion
    assert report.turns.conflicting_completions == [ids["r1"]]
    assert not report.ok()


def test_a_completion_nobody_asked_for_and_repeated_text_are_reported() -> None:
    log, ids = conversation_log()
    common = {"conversation_id": CID, "user_id": U}
    t = log[-1].occurred_at
    orphan = ev.GenerationCompleted(**common, occurred_at=t + 1, request_id=str(uuid.uuid4()), parent_id=ids["m1"], finish_reason="stop")
    opening = "The answer starts like this, "
    twice = ev.GenerationCompleted(
        **common, occurred_at=t + 2, request_id=ids["r2b"], parent_id=ids["m2b"], finish_reason="stop", content=opening * 2 + "and ends."
    )
    events = [*log, orphan, twice]
    report = audit(events, materialized(events))
    assert report.turns.unrequested == [orphan.request_id]
    assert report.turns.repeated_text == [ids["r2b"]]
    assert report.turns.in_flight == []
    assert not report.ok()


def test_repeated_opening() -> None:
    assert repeated_opening("abcdefghijklmnopqrstuvwxyz" * 2 + "tail")
    assert not repeated_opening("The the the quick brown fox jumps over the lazy dog, twice: the lazy dog.")
    assert not repeated_opening("")


def test_rows_of_other_conversations_are_not_looked_at() -> None:
    log, _ = conversation_log()
    tables = materialized(log)
    tables["messages"].append({"conversation_id": uuid.uuid4(), "message_id": uuid.uuid4(), "role": "user"})
    assert audit(log, tables).ok()


def test_times_compare_at_cassandras_millisecond_precision() -> None:
    a = datetime(2024, 1, 1, 12, 0, 0, 123456)
    assert norm(a) == norm(a.replace(microsecond=123000))
    assert norm(uuid.UUID(CID)) == CID and norm([uuid.UUID(CID)]) == (CID,)
