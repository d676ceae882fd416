"""The conversation tree fold: branches, siblings, duplicates, idempotence."""

from __future__ import annotations

import uuid

import pytest

from schemas import events as ev
from streams.tree import Conversation, apply, branch, children, empty, fold

CID = str(uuid.uuid4())
U = "user-1"


def _id() -> str:
    return str(uuid.uuid4())


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000_000

    def __call__(self) -> int:
        self.t += 1_000
        return self.t


def conversation_log() -> tuple[list[ev.Event], dict[str, str]]:
    """created → m1 → r1 (complete) → m2 → r2 (failed); m2b a sibling edit of m2 → r2b; leaf back to r2."""
    t = Clock()
    ids = {k: _id() for k in ("m1", "r1", "m2", "r2", "m2b", "r2b")}
    common = {"conversation_id": CID, "user_id": U}
    log: list[ev.Event] = [
        ev.ConversationCreated(**common, occurred_at=t(), title="t"),
        ev.MessagePosted(**common, occurred_at=t(), message_id=ids["m1"], client_message_id="c1", content="hello"),
        ev.GenerationRequested(**common, occurred_at=t(), request_id=ids["r1"], parent_id=ids["m1"], client_message_id="c1"),
        ev.GenerationCompleted(**common, occurred_at=t(), request_id=ids["r1"], parent_id=ids["m1"], finish_reason="stop", content="hi!"),
        ev.MessagePosted(**common, occurred_at=t(), message_id=ids["m2"], parent_id=ids["r1"], client_message_id="c2", content="q2"),
        ev.GenerationRequested(**common, occurred_at=t(), request_id=ids["r2"], parent_id=ids["m2"], client_message_id="c2"),
        ev.GenerationCompleted(**common, occurred_at=t(), request_id=ids["r2"], parent_id=ids["m2"], finish_reason="failed"),
        ev.MessagePosted(
            **common, occurred_at=t(), message_id=ids["m2b"], parent_id=ids["r1"], client_message_id="c3", content="q2 edited", edit_of=ids["m2"]
        ),
        ev.GenerationRequested(**common, occurred_at=t(), request_id=ids["r2b"], parent_id=ids["m2b"], client_message_id="c3"),
        ev.LeafSelected(**common, occurred_at=t(), leaf_id=ids["r2"]),
        ev.ConversationRenamed(**common, occurred_at=t(), title="renamed"),
    ]
    return log, ids


def test_fold_builds_the_tree_with_statuses_and_the_selected_leaf() -> None:
    log, ids = conversation_log()
    s = fold(log)
    assert s.title == "renamed" and s.user_id == U and s.created_at == log[0].occurred_at
    assert s.selected_leaf_id == ids["r2"]
    r1, r2, r2b = s.messages[ids["r1"]], s.messages[ids["r2"]], s.messages[ids["r2b"]]
    assert (r1.role, r1.content, r1.status, r1.finish_reason) == ("assistant", "hi!", "complete", "stop")
    assert (r2.status, r2.finish_reason) == ("failed", "failed")
    assert (r2b.status, r2b.parent_id) == ("streaming", ids["m2b"])
    assert s.requested == {ids["r1"], ids["r2"], ids["r2b"]}
    assert s.answered == {ids["r1"], ids["r2"]}


def test_branch_is_root_to_leaf_and_siblings_are_separate_branches() -> None:
    log, ids = conversation_log()
    s = fold(log)
    assert [m.message_id for m in branch(s, ids["r2"])] == [ids["m1"], ids["r1"], ids["m2"], ids["r2"]]
    assert [m.message_id for m in branch(s, ids["r2b"])] == [ids["m1"], ids["r1"], ids["m2b"], ids["r2b"]]
    assert [m.message_id for m in children(s, ids["r1"])] == [ids["m2"], ids["m2b"]]
    assert [m.message_id for m in children(s, None)] == [ids["m1"]]
    assert branch(s, _id()) == []


def test_branch_stops_at_an_unknown_parent_and_at_a_cycle() -> None:
    a, b = _id(), _id()
    common = {"conversation_id": CID, "user_id": U}
    s = fold([ev.MessagePosted(**common, message_id=a, parent_id=b, client_message_id="x", content="a")])
    assert [m.message_id for m in branch(s, a)] == [a]
    s = apply(s, ev.MessagePosted(**common, message_id=b, parent_id=a, client_message_id="y", content="b"))
    assert [m.message_id for m in branch(s, a)] == [b, a]


def test_every_event_applied_twice_leaves_the_same_state() -> None:
    log, _ = conversation_log()
    once = fold(log)
    twice: Conversation = empty(CID)
    for e in log:
        twice = apply(apply(twice, e), e)
    assert twice == once
    assert fold(log, once) == once  # the whole log again changes nothing


def test_a_retried_post_is_a_no_op_even_with_a_later_time() -> None:
    log, ids = conversation_log()
    s = fold(log[:4])  # r1 complete
    retry = [
        ev.MessagePosted(conversation_id=CID, user_id=U, occurred_at=log[3].occurred_at + 5, message_id=ids["m1"], client_message_id="c1", content="hello"),
        ev.GenerationRequested(conversation_id=CID, user_id=U, occurred_at=log[3].occurred_at + 6, request_id=ids["r1"], parent_id=ids["m1"], client_message_id="c1"),
    ]
    assert fold(retry, s) == s
    assert s.messages[ids["r1"]].status == "complete"


def test_completion_before_request_keeps_the_outcome() -> None:
    r, m = _id(), _id()
    common = {"conversation_id": CID, "user_id": U}
    s = fold([
        ev.GenerationCompleted(**common, occurred_at=10, request_id=r, parent_id=m, finish_reason="stop", content="x"),
        ev.GenerationRequested(**common, occurred_at=5, request_id=r, parent_id=m, client_message_id="c"),
    ])
    assert (s.messages[r].status, s.messages[r].content, s.messages[r].created_at) == ("complete", "x", 5)


def test_an_event_of_another_conversation_is_refused() -> None:
    with pytest.raises(ValueError):
        apply(empty(CID), ev.LeafSelected(conversation_id=_id(), user_id=U, leaf_id=_id()))


def branching_log() -> tuple[list[ev.Event], dict[str, str]]:
    """m1 → r1; m2 → r2, regenerated twice (r2b, r2c); m2 edited (m2e, under r1) → r2e; then back to r2b.

    Regenerate = a GenerationRequested with a new request id under the same user
    message; edit = a MessagePosted under the edited message's parent (what the gateway appends).
    """
    t = Clock()
    ids = {k: _id() for k in ("m1", "r1", "m2", "r2", "r2b", "r2c", "m2e", "r2e")}
    common = {"conversation_id": CID, "user_id": U}

    def asked(rid: str, parent: str, client: str) -> ev.GenerationRequested:
        return ev.GenerationRequested(**common, occurred_at=t(), request_id=ids[rid], parent_id=ids[parent], client_message_id=client)

    def done(rid: str, parent: str, text: str, reason: str = "stop") -> ev.GenerationCompleted:
        return ev.GenerationCompleted(**common, occurred_at=t(), request_id=ids[rid], parent_id=ids[parent], finish_reason=reason, content=text)

    log: list[ev.Event] = [
        ev.ConversationCreated(**common, occurred_at=t()),
        ev.MessagePosted(**common, occurred_at=t(), message_id=ids["m1"], client_message_id="c1", content="q1"),
        asked("r1", "m1", "c1"), done("r1", "m1", "a1"),
        ev.MessagePosted(**common, occurred_at=t(), message_id=ids["m2"], parent_id=ids["r1"], client_message_id="c2", content="q2"),
        asked("r2", "m2", "c2"), done("r2", "m2", "a2"),
        asked("r2b", "m2", "regen-1"), done("r2b", "m2", "a2b"),
        asked("r2c", "m2", "regen-2"), done("r2c", "m2", "a2c partial", "cancelled"),
        ev.MessagePosted(
            **common, occurred_at=t(), message_id=ids["m2e"], parent_id=ids["r1"], client_message_id="c3", content="q2 edited", edit_of=ids["m2"]
        ),
        asked("r2e", "m2e", "c3"), done("r2e", "m2e", "a2e"),
        ev.LeafSelected(**common, occurred_at=t(), leaf_id=ids["r2b"]),
    ]
    return log, ids


def test_regenerating_twice_and_editing_once_make_siblings_under_the_right_parents() -> None:
    log, ids = branching_log()
    s = fold(log)
    kids = lambda parent: [m.message_id for m in children(s, ids[parent] if parent else None)]  # noqa: E731
    assert kids(None) == [ids["m1"]]
    assert kids("r1") == [ids["m2"], ids["m2e"]]  # the edit is a sibling of the edited message
    assert kids("m2") == [ids["r2"], ids["r2b"], ids["r2c"]]  # regenerations are siblings of the first reply
    assert kids("m2e") == [ids["r2e"]]
    assert [s.messages[i].content for i in kids("m2")] == ["a2", "a2b", "a2c partial"]
    r2c = s.messages[ids["r2c"]]
    assert (r2c.status, r2c.finish_reason, r2c.content) == ("cancelled", "cancelled", "a2c partial")
    assert s.selected_leaf_id == ids["r2b"]
    assert [m.content for m in branch(s, s.selected_leaf_id)] == ["q1", "a1", "q2", "a2b"]
    assert [m.content for m in branch(s, ids["r2e"])] == ["q1", "a1", "q2 edited", "a2e"]


def test_the_selected_leaf_follows_new_messages_and_leaf_selections() -> None:
    log, ids = branching_log()
    leaves = [fold(log[: i + 1]).selected_leaf_id for i in range(len(log))]
    by_id = {v: k for k, v in ids.items()}
    assert [by_id.get(x) for x in leaves] == [
        None, "m1", "r1", "r1", "m2", "r2", "r2", "r2b", "r2b", "r2c", "r2c", "m2e", "r2e", "r2e", "r2b"
    ]


def test_a_cancelled_reply_keeps_its_partial_text_and_status() -> None:
    r, m = _id(), _id()
    common = {"conversation_id": CID, "user_id": U}
    s = fold([
        ev.GenerationRequested(**common, occurred_at=1, request_id=r, parent_id=m, client_message_id="c"),
        ev.GenerationCompleted(**common, occurred_at=2, request_id=r, parent_id=m, finish_reason="cancelled", content="half"),
    ])
    assert (s.messages[r].status, s.messages[r].content, s.messages[r].finish_reason) == ("cancelled", "half", "cancelled")
    assert r in s.answered
