"""A flagged turn in the tree and the tables: the notice, never the text, whatever order the log has."""

from __future__ import annotations

import itertools
import uuid

from schemas import events as ev
from schemas.endings import FILTERED_NOTICE
from streams.tree import branch, empty
from tests.unit.streams.test_projection import rows, run, store
from tests.unit.streams.test_tree import CID, U

MID, RID = str(uuid.uuid4()), str(uuid.uuid4())


def turn_events(finish: str, content: str, t0: int = 1_000_000) -> dict[str, ev.Event]:
    return {
        "posted": ev.MessagePosted(
            conversation_id=CID, user_id=U, message_id=MID, role="user", content="q", client_message_id="c", occurred_at=t0
        ),
        "requested": ev.GenerationRequested(
            conversation_id=CID, user_id=U, request_id=RID, parent_id=MID, client_message_id="c", occurred_at=t0 + 1
        ),
        # The worker finished a moment after the verdict (the cancel came too late): its time is later.
        "completed": ev.GenerationCompleted(
            conversation_id=CID, user_id=U, request_id=RID, parent_id=MID, finish_reason=finish, content=content,
            occurred_at=t0 + 30,
        ),
        "moderated": ev.GenerationModerated(
            conversation_id=CID, user_id=U, request_id=RID, parent_id=MID, direction="output", stage="window",
            action="cut", categories=["violence"], occurred_at=t0 + 20,
        ),
    }  # fmt: skip


def messages(writes) -> dict:  # type: ignore[no-untyped-def]
    return {str(dict(k)["message_id"]): r for k, r in rows(store(writes), "messages").items()}


def test_in_every_order_the_stored_reply_and_the_tree_show_the_notice() -> None:
    events = turn_events("stop", "the flagged words")
    for order in itertools.permutations(["requested", "completed", "moderated"]):
        writes, state = run([events["posted"], *(events[k] for k in order)])
        reply = messages(writes)[RID]
        assert reply["content"] == FILTERED_NOTICE, order
        assert reply["finish_reason"] == "content_filter" and reply["status"] == "filtered", order
        assert '"categories": ["violence"]' in reply["moderation"]
        assert state.messages[RID].content == FILTERED_NOTICE, order  # the next turn's prompt never has the text
        assert [m.content for m in branch(state, RID)] == ["q", FILTERED_NOTICE]


def test_a_flagged_input_marks_the_users_message_and_keeps_its_text() -> None:
    events = turn_events("content_filter", FILTERED_NOTICE)
    marked = ev.GenerationModerated(
        conversation_id=CID, user_id=U, request_id=RID, parent_id=MID, direction="input", stage="input", action="cut",
        categories=["harassment"], occurred_at=1_000_010,
    )
    writes, _ = run([events["posted"], events["requested"], marked, events["completed"]])
    question = messages(writes)[MID]
    assert question["content"] == "q" and '"direction": "input"' in question["moderation"]


def test_a_verdict_for_a_turn_whose_parent_is_unknown_writes_no_parent() -> None:
    marked = ev.GenerationModerated(
        conversation_id=CID, user_id=U, request_id=RID, parent_id="", direction="output", stage="final", action="withdrawn"
    )
    writes, _ = run([marked], empty(CID))
    assert all(dict(w.cells).get("parent_id", "absent") == "absent" for w in writes)
