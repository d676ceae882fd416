"""The Cassandra projection: writes per event, timestamps from events, replay in any amount → same rows.

Rows are checked through a small last-write-wins table model (Cassandra's cell
rule: the highest timestamp wins; a tie goes to the greater value).
"""

from __future__ import annotations

from schemas import sealing

import dataclasses
import random
import uuid
from typing import Any

import pytest

from schemas import events as ev
from streams.projection import SEALED_CELLS, Write, cql, to_time, writes_for
from streams.tree import Conversation, apply, empty
from tests.unit.streams.test_tree import CID, U, conversation_log

Tables = dict[tuple[str, tuple[Any, ...]], dict[str, tuple[int, Any]]]


def run(events: list[ev.Event], state: Conversation | None = None) -> tuple[list[Write], Conversation]:
    """The materializer's loop without Cassandra: writes from the state before each event."""
    state = state or empty(CID)
    out: list[Write] = []
    for e in events:
        out += writes_for(state, e, sealing.sealer())
        state = apply(state, e)
    return out, state


def store(writes: list[Write], tables: Tables | None = None) -> Tables:
    tables = {} if tables is None else tables
    for w in writes:
        row = tables.setdefault((w.table, w.key), {})
        for col, value in w.cells:
            old = row.get(col)
            if old is None or (w.timestamp, repr(value)) > (old[0], repr(old[1])):
                row[col] = (w.timestamp, value)
    return tables


def rows(tables: Tables, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {k: {c: v for c, (_, v) in r.items()} for (t, k), r in tables.items() if t == table}


def _key(*pairs: tuple[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(pairs)


def test_each_event_writes_its_rows_at_its_own_time() -> None:
    log, ids = conversation_log()
    writes, _ = run(log)
    by_event: list[list[Write]] = []
    state = empty(CID)
    for e in log:
        ws = writes_for(state, e, sealing.sealer())
        by_event.append(ws)
        state = apply(state, e)
        assert all(w.timestamp == e.occurred_at for w in ws)
    created, posted, requested, completed = by_event[:4]
    assert [w.table for w in created] == ["conversations", "conversations_by_user"]
    assert [w.table for w in posted] == ["messages", "conversations"]
    assert dict(posted[1].cells)["selected_leaf_id"] == uuid.UUID(ids["m1"])
    assert dict(requested[0].cells)["status"] == "streaming"
    assert dict(requested[0].cells)["created_at"] == to_time(log[2].occurred_at)
    assert dict(requested[1].cells)["selected_leaf_id"] == uuid.UUID(ids["r1"])
    done = dict(completed[0].cells)
    assert (done["status"], done["finish_reason"], done["content"]) == ("complete", "stop", "hi!")
    renamed = by_event[-1]
    assert [w.table for w in renamed] == ["conversations", "conversations_by_user"]
    assert dict(renamed[1].key)["created_at"] == to_time(log[0].occurred_at)  # carried from ConversationCreated


def test_the_tables_hold_the_tree() -> None:
    log, ids = conversation_log()
    t = store(run(log)[0])
    conv = rows(t, "conversations")[_key(("conversation_id", uuid.UUID(CID)))]
    assert conv["title"] == "renamed" and conv["selected_leaf_id"] == uuid.UUID(ids["r2"])
    assert conv["created_at"] == to_time(log[0].occurred_at) and conv["updated_at"] == to_time(log[-1].occurred_at)
    by_user = rows(t, "conversations_by_user")
    assert list(by_user.values()) == [{"title": "renamed"}]
    msgs = {dict(k)["message_id"]: r for k, r in rows(t, "messages").items()}
    assert {str(m) for m in msgs} == set(ids.values())
    assert msgs[uuid.UUID(ids["r2"])]["status"] == "failed"
    assert msgs[uuid.UUID(ids["r2b"])]["status"] == "streaming"
    assert msgs[uuid.UUID(ids["m2b"])]["parent_id"] == uuid.UUID(ids["r1"])


def test_replaying_twice_or_from_the_middle_or_in_any_write_order_gives_the_same_rows() -> None:
    log, _ = conversation_log()
    writes, state = run(log)
    once = store(writes)
    assert run(log)[0] == writes  # deterministic: the same log, the same writes
    again, _ = run(log, state)  # the materializer's memory after the first pass (as if reloaded from the rows)
    assert store(again, store(writes)) == once
    assert store(writes, store(writes)) == once  # the same writes twice (redelivery without memory)
    redelivered, _ = run(log[5:], run(log[:5])[1])  # a crash after event 5: its tail comes again
    assert store(redelivered, store(writes)) == once
    shuffled = writes[:]
    random.Random(7).shuffle(shuffled)
    assert store(shuffled) == once


def _retry(log: list[ev.Event], ids: dict[str, str]) -> list[ev.Event]:
    """The POST of m1 appended again, a second later (its first append was in doubt), and the conversation's."""
    later = log[3].occurred_at + 1_000_000
    return [
        ev.MessagePosted(conversation_id=CID, user_id=U, occurred_at=later, message_id=ids["m1"], client_message_id="c1", content="hello"),
        ev.GenerationRequested(
            conversation_id=CID, user_id=U, occurred_at=later + 1, request_id=ids["r1"], parent_id=ids["m1"],
            client_message_id="c1", token_offset=999,
        ),
        ev.ConversationCreated(conversation_id=CID, user_id=U, occurred_at=later + 2, title="t"),
    ]  # fmt: skip


def test_a_retried_post_after_the_reply_finished_changes_nothing_but_when_it_was_touched() -> None:
    log, ids = conversation_log()
    log[2] = dataclasses.replace(log[2], token_offset=41)
    writes, state = run(log[:4])
    before = store(writes)
    restated, after = run(_retry(log, ids), state)
    assert after == state  # the log keeps the first
    changed = {
        (t, k, c) for (t, k), row in store(restated, store(writes)).items() for c, (_, v) in row.items() if before[(t, k)][c][1] != v
    }
    assert {c for _, _, c in changed} == {"updated_at"}
    assert run(_retry(log, ids)[:2], state)[0] == run(_retry(log, ids)[:2], state)[0]  # deterministic


def test_a_repeat_written_through_without_the_first_is_undone_by_its_restatement() -> None:
    """The gateway that took the retried POST could not see the first (Cassandra behind): it wrote the
    repeat through as a new message. The materializer's restatement puts every such cell back as the
    log has it: the first's created_at, the finished reply's status and the stream's own offset."""
    log, ids = conversation_log()
    log[2] = dataclasses.replace(log[2], token_offset=41)
    writes, state = run(log[:4])
    retry = _retry(log, ids)[:2]
    through = [w for e in retry for w in writes_for(empty(CID), e, sealing.UNSEALED)]
    restated, _ = run(retry, state)
    assert restated, "a repeat with a time of its own restates its message"
    got = store(writes + through + restated)
    assert rows(got, "messages") == rows(store(writes + restated), "messages")  # = the log's projection
    assert rows(got, "conversations") == rows(store(writes + restated), "conversations")
    reply = rows(got, "messages")[_key(("conversation_id", uuid.UUID(CID)), ("message_id", uuid.UUID(ids["r1"])))]
    assert (reply["status"], reply["stream_offset"], reply["created_at"]) == ("complete", 41, to_time(log[2].occurred_at))


def test_a_redelivered_creation_event_restates_nothing() -> None:
    log, _ = conversation_log()
    _, state = run(log[:4])
    assert run(log[1:3], state)[0] == []


def test_a_rename_of_an_unknown_conversation_does_not_invent_a_list_row() -> None:
    e = ev.ConversationRenamed(conversation_id=CID, user_id=U, title="x")
    assert [w.table for w in writes_for(empty(CID), e, sealing.sealer())] == ["conversations"]


def test_malformed_ids_raise_value_error() -> None:
    e = ev.LeafSelected(conversation_id="not-a-uuid", user_id=U, leaf_id=str(uuid.uuid4()))
    with pytest.raises(ValueError):
        writes_for(empty("not-a-uuid"), e, sealing.sealer())


def test_statements_are_timestamped_upserts() -> None:
    log, _ = conversation_log()
    w = writes_for(empty(CID), log[0], sealing.sealer())[0]
    assert cql(w.shape) == (
        "UPDATE conversations USING TIMESTAMP ? SET user_id = ?, title = ?, created_at = ?, updated_at = ? "
        "WHERE conversation_id = ?"
    )
    assert w.values[0] == log[0].occurred_at and w.values[-1] == uuid.UUID(CID)


def test_branches_and_the_selected_leaf_in_the_tables_match_the_tree_after_every_event() -> None:
    from tests.unit.streams.test_tree import branching_log
    from streams.tree import fold

    log, ids = branching_log()
    for n in range(2, len(log) + 1):
        t = store(run(log[:n])[0])
        [conv] = rows(t, "conversations").values()
        want = fold(log[:n]).selected_leaf_id
        assert conv.get("selected_leaf_id") == (uuid.UUID(want) if want else None), n
    msgs = {str(dict(k)["message_id"]): r for k, r in rows(t, "messages").items()}
    assert {i for i, r in msgs.items() if r.get("parent_id") == uuid.UUID(ids["m2"])} == {ids["r2"], ids["r2b"], ids["r2c"]}
    assert {i for i, r in msgs.items() if r.get("parent_id") == uuid.UUID(ids["r1"])} == {ids["m2"], ids["m2e"]}
    r2c = msgs[ids["r2c"]]
    assert (r2c["status"], r2c["finish_reason"], r2c["content"]) == ("cancelled", "cancelled", "a2c partial")
    assert conv["selected_leaf_id"] == uuid.UUID(ids["r2b"])


def _partition_keys() -> dict[str, tuple[str, ...]]:
    """Each table's partition key columns, from the CQL migrations."""
    import re
    from pathlib import Path

    out: dict[str, tuple[str, ...]] = {}
    for path in sorted((Path(__file__).parents[3] / "schemas" / "cql").glob("*.cql")):
        for name, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\)\s*(?:WITH[^;]*)?;", path.read_text(), re.S):
            inline = re.search(r"^\s*(\w+)\s+\w+\s+PRIMARY KEY", body, re.M)
            if inline:
                out[name] = (inline.group(1),)
            else:
                key = re.search(r"PRIMARY KEY \(\(([^)]*)\)", body)
                assert key, name
                out[name] = tuple(c.strip() for c in key.group(1).split(","))
    return out


def test_a_writes_partition_is_its_tables_partition_key_so_a_batch_of_one_partition_is_one_mutation() -> None:
    from streams.checkpoint import Checkpoint

    keys = _partition_keys()
    log, _ = conversation_log()
    writes, _ = run(log)
    writes.append(Checkpoint(CID, str(uuid.uuid4()), "partial", 3, 5).write(sealing.sealer()))
    assert {w.table for w in writes} >= {"conversations", "conversations_by_user", "messages"}
    for w in writes:
        assert keys[w.table] == (w.partition[0],) == (w.key[0][0],), w.table
        assert cql(w.shape).startswith(f"UPDATE {w.table} USING TIMESTAMP ? ")  # order within a partition is moot


def test_a_reply_in_flight_when_its_conversation_is_deleted_ends_blank_whatever_its_checkpoints_wrote() -> None:
    from streams.checkpoint import Checkpoint

    log, ids = conversation_log()  # r2b is still streaming at the end of it
    t = log[-1].occurred_at
    deleted = ev.ConversationDeleted(conversation_id=CID, user_id=U, occurred_at=t + 10)
    writes, state = run([*log, deleted])
    # A chunk streamed after the deletion: its checkpoint is timestamped after it, so it wins over the blanking.
    writes.append(Checkpoint(CID, ids["r2b"], "text after the delete", 4, timestamp=t + 19, user_id=U).write(sealing.sealer()))
    late = [
        ev.GenerationCompleted(conversation_id=CID, user_id=U, occurred_at=t + 20, request_id=ids["r2b"], parent_id=ids["m2b"], finish_reason="cancelled", content="text after the delete"),
        ev.ConversationRenamed(conversation_id=CID, user_id=U, occurred_at=t + 21, title="still deleted"),
    ]  # fmt: skip
    more, _ = run(late, state)
    assert [w.table for w in more] == ["messages"]  # the completion alone writes, and only to blank
    reply = rows(store(writes + more), "messages")[_key(("conversation_id", uuid.UUID(CID)), ("message_id", uuid.UUID(ids["r2b"])))]
    assert reply["content"] == "" and reply["citations"] == "" and reply["retrieval"] == ""


def test_the_projection_never_reads_a_messages_text_so_the_materializer_loads_rows_without_it() -> None:
    from dataclasses import replace

    from streams.tree import frozen_messages

    log, ids = conversation_log()
    more = [
        ev.GenerationCompleted(conversation_id=CID, user_id=U, occurred_at=log[-1].occurred_at + 1, request_id=ids["r2b"], parent_id=ids["m2b"], finish_reason="stop", content="b"),
        ev.ConversationDeleted(conversation_id=CID, user_id=U, occurred_at=log[-1].occurred_at + 2),
    ]  # fmt: skip
    seen, blind = empty(CID), empty(CID)  # blind: every message's text gone, as Store(texts=False) loads it
    for e in [*log, *more]:
        assert writes_for(blind, e, sealing.sealer()) == writes_for(seen, e, sealing.sealer()), type(e).__name__
        seen, blind = apply(seen, e), apply(blind, e)
        blind = replace(blind, messages=frozen_messages({k: replace(m, content="") for k, m in blind.messages.items()}))


def test_a_post_whose_reply_never_landed_retried_a_microsecond_apart_keeps_the_replys_leaf() -> None:
    """The first POST's MessagePosted landed, its GenerationRequested did not; the retry appends both,
    a microsecond apart. The conversation's leaf is the reply's, in the rows as in the log (a restated
    leaf at the repeat's time + 1 tied with the request's and won by value: bench.chaos --replicas 3)."""
    message, reply = "ffffffff-0000-5000-8000-000000000001", "00000000-0000-5000-8000-000000000002"
    common = {"conversation_id": CID, "user_id": U}
    first = [
        ev.ConversationCreated(**common, occurred_at=1_000, title="t"),
        ev.MessagePosted(**common, occurred_at=2_000, message_id=message, client_message_id="c", content="hi"),
    ]
    retry = [
        ev.MessagePosted(**common, occurred_at=9_000, message_id=message, client_message_id="c", content="hi"),
        ev.GenerationRequested(**common, occurred_at=9_001, request_id=reply, parent_id=message, client_message_id="c"),
    ]
    writes, state = run(first)
    materialized, after = run(retry, state)
    through = [w for e in retry for w in writes_for(empty(CID), e, sealing.UNSEALED)]  # a gateway that saw nothing
    got = rows(store(writes + through + materialized), "conversations")
    assert after.selected_leaf_id == reply
    assert [r["selected_leaf_id"] for r in got.values()] == [uuid.UUID(reply)]
    assert got == rows(store(writes + materialized), "conversations")
    user = rows(store(writes + through + materialized), "messages")[_key(("conversation_id", uuid.UUID(CID)), ("message_id", uuid.UUID(message)))]
    assert user["created_at"] == to_time(2_000)  # the first's, not the retry's


def test_an_event_redelivered_to_a_state_loaded_from_the_rows_restates_nothing() -> None:
    """The rows keep times to the millisecond; the log to the microsecond. A replay over rows already
    written (a redelivery without memory) is not a retried POST."""
    log, ids = conversation_log()
    log[1] = dataclasses.replace(log[1], occurred_at=log[1].occurred_at // 1000 * 1000 + 123)  # µs, not a whole ms
    _, state = run(log[:4])
    m1 = state.messages[ids["m1"]]
    from_rows = state.with_message(dataclasses.replace(m1, created_at=m1.created_at // 1000 * 1000))
    assert writes_for(from_rows, log[1], sealing.UNSEALED) == []


def test_feedback_lands_on_the_reply_row_the_last_rating_standing_and_nowhere_else() -> None:
    log, ids = conversation_log()
    common = {"conversation_id": CID, "user_id": U}
    end = log[-1].occurred_at
    rated = [
        ev.FeedbackGiven(**common, occurred_at=end + 1, message_id=ids["r1"], rating="down", reason="too short"),
        ev.FeedbackGiven(**common, occurred_at=end + 2, message_id=ids["r1"], rating="up"),
        ev.FeedbackGiven(**common, occurred_at=end + 3, message_id=ids["r2"], rating="down"),
        ev.FeedbackGiven(**common, occurred_at=end + 4, message_id=ids["r2"], rating=""),  # taken back
        ev.FeedbackGiven(**common, occurred_at=end + 5, message_id=ids["m1"], rating="up"),  # the user's own message
        ev.FeedbackGiven(**common, occurred_at=end + 6, message_id=str(uuid.uuid4()), rating="up"),  # not in it
    ]
    writes, _ = run(log + rated)
    messages = rows(store(writes), "messages")
    feedback = {dict(k)["message_id"]: (r.get("feedback"), r.get("feedback_reason")) for k, r in messages.items()}
    assert feedback[uuid.UUID(ids["r1"])] == ("up", "")
    assert feedback[uuid.UUID(ids["r2"])] == ("", "")
    assert feedback[uuid.UUID(ids["m1"])] == (None, None) and len(messages) == 6  # no row invented
    # In any order of replay, the same cells (each write at its event's time).
    shuffled = store(random.Random(7).sample(writes, len(writes)))
    assert rows(shuffled, "messages") == messages


def test_a_share_is_keyed_by_its_hash_with_the_secret_sealed_and_a_revocation_ends_it() -> None:
    log, ids = conversation_log()
    common = {"conversation_id": CID, "user_id": U}
    end = log[-1].occurred_at
    shared = [
        ev.ConversationShared(**common, occurred_at=end + 1, share_id="a" * 64, secret="s1", leaf_id=ids["r1"], expires_at=end + 99),
        ev.ConversationShared(**common, occurred_at=end + 2, share_id="b" * 64, secret="s2", leaf_id=ids["r2"]),
        ev.ConversationShared(**common, occurred_at=end + 3, share_id="c" * 64, secret="s3", leaf_id=str(uuid.uuid4())),  # not in it
        ev.ShareRevoked(**common, occurred_at=end + 4, share_id="a" * 64),
    ]
    writes, _ = run(log + shared)
    shares = {dict(k)["share_id"]: r for k, r in rows(store(writes), "shares").items()}
    assert set(shares) == {"a" * 64, "b" * 64}  # a branch the log does not know is not shared
    assert shares["a" * 64]["revoked_at"] is not None and shares["b" * 64].get("revoked_at") is None
    assert shares["b" * 64]["leaf_id"] == uuid.UUID(ids["r2"]) and shares["b" * 64]["user_id"] == U
    listed = {dict(k)["share_id"]: r for k, r in rows(store(writes), "shares_by_conversation").items()}
    assert (listed["a" * 64]["secret"], listed["b" * 64]["secret"]) == ("", "s2")  # the revoked one's secret blanked
    assert "secret" not in shares["b" * 64]  # the visitor's row never holds the secret
    sealed = [w for w in writes if w.table == "shares_by_conversation"]
    assert sealed and all("secret" in SEALED_CELLS[w.table] for w in sealed)
