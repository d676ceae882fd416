"""The context builder without Kafka: prompts per turn, duplicates skipped, cold conversations reloaded."""

from __future__ import annotations

from schemas import sealing

import uuid
from dataclasses import replace

from schemas import events as ev
from schemas.endings import CONTEXT_UNAVAILABLE
from streams.context import ContextBuilder
from streams.settings import ContextSettings
from streams.tree import Conversation, empty, fold

CFG = ContextSettings(system_prompt="sys", budget_tokens=1000, max_tokens=77, parent_wait_s=0.3)


class Rows:
    """Stands in for Cassandra: the state the materializer would have written."""

    def __init__(self, states: dict[str, Conversation] | None = None) -> None:
        self.states = states or {}
        self.loads = 0

    async def load(self, conversation_id: str) -> Conversation:
        self.loads += 1
        return self.states.get(conversation_id, empty(conversation_id))


def _turn(cid: str, n: int, parent: str | None) -> tuple[ev.MessagePosted, ev.GenerationRequested]:
    mid, rid = str(uuid.uuid4()), str(uuid.uuid4())
    common = {"conversation_id": cid, "user_id": "u"}
    return (
        ev.MessagePosted(**common, message_id=mid, parent_id=parent, client_message_id=f"c{n}", content=f"question {n}"),
        ev.GenerationRequested(**common, request_id=rid, parent_id=mid, client_message_id=f"c{n}", tier="plus"),
    )


async def test_turns_build_prompts_and_the_reply_feeds_the_next_turn() -> None:
    cid = str(uuid.uuid4())
    b = ContextBuilder(CFG, Rows())
    assert await b.handle(ev.ConversationCreated(conversation_id=cid, user_id="u", model="m-user")) == []
    m1, g1 = _turn(cid, 1, None)
    assert await b.handle(m1) == []
    [req] = await b.handle(g1)
    assert isinstance(req, ev.InferenceRequested)
    assert [(m.role, m.content) for m in req.messages] == [("system", "sys"), ("user", "question 1")]
    assert (req.request_id, req.parent_id, req.max_tokens, req.model, req.tier) == (g1.request_id, m1.message_id, 77, "m-user", "plus")
    assert req.budget_tokens == 1000 and req.prompt_tokens > 0 and req.key == cid.encode()

    assert await b.handle(g1) == []  # a retried POST appends the same request again: nothing new
    done = ev.GenerationCompleted(conversation_id=cid, user_id="u", request_id=g1.request_id, parent_id=m1.message_id, finish_reason="stop", content="answer 1")
    assert await b.handle(done) == []
    assert await b.handle(g1) == []  # answered: still nothing

    m2, g2 = _turn(cid, 2, g1.request_id)
    await b.handle(m2)
    [req2] = await b.handle(g2)
    assert [(m.role, m.content) for m in req2.messages] == [
        ("system", "sys"), ("user", "question 1"), ("assistant", "answer 1"), ("user", "question 2")
    ]


async def test_a_conversation_not_in_memory_is_reloaded_from_the_rows() -> None:
    cid = str(uuid.uuid4())
    m1, g1 = _turn(cid, 1, None)
    done = ev.GenerationCompleted(conversation_id=cid, user_id="u", request_id=g1.request_id, parent_id=m1.message_id, finish_reason="stop", content="answer 1")
    m2, g2 = _turn(cid, 2, g1.request_id)
    rows = Rows({cid: fold([m1, g1, done, m2])})
    b = ContextBuilder(CFG, rows)
    [req] = await b.handle(g2)
    assert [m.content for m in req.messages] == ["sys", "question 1", "answer 1", "question 2"]
    assert await b.handle(g1) == []  # answered according to the rows
    assert rows.loads == 1  # then kept in memory


async def test_a_question_that_never_appears_fails_the_turn_instead_of_guessing() -> None:
    cid = str(uuid.uuid4())
    _, g = _turn(cid, 1, None)
    rows = Rows()
    out = await ContextBuilder(CFG, rows).handle(g)
    # The outcome on the log first, then the client's stream end: as every turn ends (schemas/endings.py).
    assert [type(e).__name__ for e in out] == ["GenerationCompleted", "TokenChunk"]
    assert all(e.error_code == CONTEXT_UNAVAILABLE and e.finish_reason == "failed" for e in out)  # type: ignore[attr-defined]
    assert rows.loads > 1  # it waited for the materializer before giving up


async def test_the_cache_is_bounded_and_a_forgotten_conversation_comes_back_from_the_rows() -> None:
    rows = Rows()
    b = ContextBuilder(ContextSettings(cache_conversations=2), rows)
    cids = [str(uuid.uuid4()) for _ in range(3)]
    for cid in cids:
        await b.handle(ev.ConversationCreated(conversation_id=cid, user_id="u"))
    assert rows.loads == 3
    await b.handle(ev.LeafSelected(conversation_id=cids[0], user_id="u", leaf_id=str(uuid.uuid4())))
    assert rows.loads == 4  # the oldest was evicted


def test_rows_give_back_the_tree_and_only_finished_replies_count_as_answered() -> None:
    from datetime import datetime
    from types import SimpleNamespace as Row

    from streams.store import state_from_rows

    cid, m, r_done, r_live = (uuid.uuid4() for _ in range(4))
    at = datetime(2026, 1, 2, 3, 4, 5, 678000)  # naive UTC, as the driver returns it
    conv = Row(user_id="u", title="t", model=None, created_at=at, selected_leaf_id=r_live)
    msgs = [
        Row(message_id=m, parent_id=None, role="user", content="q", status="complete", finish_reason=None, created_at=at),
        Row(message_id=r_done, parent_id=m, role="assistant", content="a", status="complete", finish_reason="stop", created_at=at),
        Row(message_id=r_live, parent_id=m, role="assistant", content=None, status="streaming", finish_reason=None, created_at=at),
    ]
    s = state_from_rows(str(cid), conv, msgs)
    assert s.created_at == 1_767_323_045_678_000 and s.selected_leaf_id == str(r_live)
    assert s.messages[str(r_done)].parent_id == str(m) and s.messages[str(r_live)].content == ""
    assert s.answered == {str(r_done)} and s.requested == frozenset()
    assert s.seen_request(str(r_done)) and not s.seen_request(str(r_live))


def _done(g: ev.GenerationRequested, text: str) -> ev.GenerationCompleted:
    return ev.GenerationCompleted(
        conversation_id=g.conversation_id, user_id="u", request_id=g.request_id, parent_id=g.parent_id, finish_reason="stop", content=text
    )


def _regenerate(g: ev.GenerationRequested, action: str) -> ev.GenerationRequested:
    """What the gateway appends for POST /v1/messages/{reply}/regenerate: a new reply under the same question."""
    return ev.GenerationRequested(
        conversation_id=g.conversation_id, user_id="u", request_id=str(uuid.uuid4()), parent_id=g.parent_id, client_message_id=action
    )


async def test_a_regenerate_is_a_new_request_whose_prompt_leaves_out_the_first_reply() -> None:
    cid = str(uuid.uuid4())
    b = ContextBuilder(CFG, Rows())
    m1, g1 = _turn(cid, 1, None)
    await b.handle(m1)
    await b.handle(g1)
    await b.handle(_done(g1, "answer 1"))
    regen = _regenerate(g1, "regen-action-1")
    [req] = await b.handle(regen)
    assert isinstance(req, ev.InferenceRequested)
    assert (req.request_id, req.parent_id) == (regen.request_id, m1.message_id)
    assert [(m.role, m.content) for m in req.messages] == [("system", "sys"), ("user", "question 1")]
    assert await b.handle(regen) == []  # the regenerate action retried: a duplicate of itself only
    [again] = await b.handle(_regenerate(g1, "regen-action-2"))  # a second regenerate is new again
    assert [m.content for m in again.messages] == ["sys", "question 1"]


async def test_a_regenerate_of_a_conversation_reloaded_from_the_rows_is_built_too() -> None:
    cid = str(uuid.uuid4())
    m1, g1 = _turn(cid, 1, None)
    b = ContextBuilder(CFG, Rows({cid: fold([m1, g1, _done(g1, "answer 1")])}))
    regen = _regenerate(g1, "regen-action")
    [req] = await b.handle(regen)
    assert req.request_id == regen.request_id and [m.content for m in req.messages] == ["sys", "question 1"]


async def test_prompts_come_from_the_branch_of_the_parent_only_never_from_siblings() -> None:
    from tests.unit.streams.test_tree import CID, branching_log

    log, ids = branching_log()
    b = ContextBuilder(CFG, Rows())
    prompts: dict[str, list[str]] = {}
    for e in log:
        for out in await b.handle(e):
            assert isinstance(out, ev.InferenceRequested)
            prompts[out.request_id] = [m.content for m in out.messages]
    assert prompts[ids["r2"]] == prompts[ids["r2b"]] == prompts[ids["r2c"]] == ["sys", "q1", "a1", "q2"]
    assert prompts[ids["r2e"]] == ["sys", "q1", "a1", "q2 edited"]
    # The log ends with LeafSelected back to r2b; the next turn is posted under it.
    m3, g3 = _turn(CID, 3, ids["r2b"])
    await b.handle(m3)
    [req] = await b.handle(g3)
    assert [m.content for m in req.messages] == ["sys", "q1", "a1", "q2", "a2b", "question 3"]
    # And one under the edited branch sees only that branch.
    m4, g4 = _turn(CID, 4, ids["r2e"])
    await b.handle(ev.LeafSelected(conversation_id=CID, user_id="u", leaf_id=ids["r2e"]))
    await b.handle(m4)
    [req4] = await b.handle(g4)
    assert [m.content for m in req4.messages] == ["sys", "q1", "a1", "q2 edited", "a2e", "question 4"]


def test_a_row_only_a_checkpoint_wrote_is_not_taken_for_a_known_reply() -> None:
    """The checkpoints agent may write a reply's text before the materializer saw its GenerationRequested."""
    from types import SimpleNamespace as Row

    from streams.projection import writes_for
    from streams.store import state_from_rows

    cid, m, r = str(uuid.uuid4()), uuid.uuid4(), uuid.uuid4()
    msgs = [
        Row(message_id=m, parent_id=None, role="user", content="q", status="complete", finish_reason=None, created_at=None),
        Row(message_id=r, parent_id=None, role="assistant", content="partial", status=None, finish_reason=None, created_at=None),
    ]
    s = state_from_rows(cid, None, msgs)
    assert str(r) not in s.messages and str(m) in s.messages
    asked = ev.GenerationRequested(conversation_id=cid, user_id="u", request_id=str(r), parent_id=str(m), client_message_id="c")
    [row, _] = writes_for(s, asked, sealing.sealer())
    assert dict(row.cells)["status"] == "streaming" and dict(row.cells)["role"] == "assistant"


async def test_a_strict_policy_checks_the_input_first_and_a_flagged_turn_never_reaches_an_engine() -> None:
    from moderation.categories import CATEGORIES
    from moderation.classifier import Scores
    from moderation.policy import policy_from
    from schemas.endings import FILTERED_NOTICE
    from streams.moderator import Checker

    class Flags:
        model = "flags/1"

        async def classify(self, texts):  # type: ignore[no-untyped-def]
            return [Scores({c: float("flag me" in t and c == "hate") for c in CATEGORIES}) for t in texts]

    screen = Checker(Flags(), policy_from('{"plus": {"mode": "strict"}}'))
    b = ContextBuilder(CFG, Rows(), screen=screen)
    cid = str(uuid.uuid4())
    m1, g1 = _turn(cid, 1, None)
    await b.handle(m1)
    [req] = await b.handle(g1)
    assert isinstance(req, ev.InferenceRequested)  # clean: built as ever
    bad = ev.MessagePosted(conversation_id=cid, user_id="u", message_id=str(uuid.uuid4()), parent_id=g1.request_id, client_message_id="c2", content="flag me")
    asked = ev.GenerationRequested(conversation_id=cid, user_id="u", request_id=str(uuid.uuid4()), parent_id=bad.message_id, client_message_id="c2", tier="plus")
    await b.handle(bad)
    out = await b.handle(asked)
    assert [type(e).__name__ for e in out] == ["ModerationResult", "GenerationModerated", "GenerationCompleted", "TokenChunk"]
    assert out[2].finish_reason == "content_filter" and out[2].content == FILTERED_NOTICE and out[3].finish_reason == "content_filter"
    free = ev.GenerationRequested(conversation_id=cid, user_id="u", request_id=str(uuid.uuid4()), parent_id=bad.message_id, client_message_id="c3", tier="free")
    [parallel] = await b.handle(free)  # the free tier's policy checks beside the generation: not here
    assert isinstance(parallel, ev.InferenceRequested)


async def test_an_as_sent_turn_is_the_clients_messages_only_whole_and_uncapped() -> None:
    """The OpenAI API's turn: no system prompt, no memory, nothing left out however far over the budget, and no
    cap of Parley's on the reply (0: the router gives it the rest of the pool's context)."""
    cid = str(uuid.uuid4())
    tight = ContextSettings(system_prompt="sys", budget_tokens=60, summary_tokens=20, max_tokens=77, parent_wait_s=0.3)
    b = ContextBuilder(tight, Rows(), memory=lambda user_id: ("the user's secret fact",))
    await b.handle(ev.ConversationCreated(conversation_id=cid, user_id="u"))
    parent, history = None, []
    for n in range(12):  # far over 60 tokens
        m, g = _turn(cid, n, parent)
        await b.handle(m)
        history.append(("user", m.content))
        if n < 11:
            done = ev.GenerationCompleted(
                conversation_id=cid, user_id="u", request_id=g.request_id, parent_id=m.message_id, finish_reason="stop",
                content=f"answer {n}",
            )
            await b.handle(done)
            history.append(("assistant", f"answer {n}"))
            parent = g.request_id
    [req] = await b.handle(replace(g, as_sent=True))
    assert [(m.role, m.content) for m in req.messages] == history
    assert req.max_tokens == 0 and req.prompt_tokens > tight.budget_tokens
    [capped] = await b.handle(replace(g, request_id=str(uuid.uuid4()), as_sent=True, max_tokens=9))
    assert capped.max_tokens == 9
    # The same turn through Parley's own API: the system prompt and the memory first, the oldest turns left out.
    [own] = await b.handle(replace(g, request_id=str(uuid.uuid4())))
    assert [m.content for m in own.messages[:2]] == ["sys", "What you know about the user:\n- the user's secret fact"]
    assert len(own.messages) < len(history) and own.max_tokens == 77


async def test_a_strict_policy_whose_classifier_gives_no_verdict_stops_the_turn_before_any_engine() -> None:
    from moderation.classifier import NotAVerdict
    from moderation.policy import policy_from
    from schemas.endings import FILTERED_NOTICE
    from streams.moderator import Checker

    class Garbled:
        model = "garbled/1"

        async def classify(self, texts):  # type: ignore[no-untyped-def]
            raise NotAVerdict("garbled")

    b = ContextBuilder(CFG, Rows(), screen=Checker(Garbled(), policy_from('{"plus": {"mode": "strict"}}'), give_up_s=0.01))
    cid = str(uuid.uuid4())
    m1, g1 = _turn(cid, 1, None)
    await b.handle(m1)
    out = await b.handle(g1)
    assert [type(e).__name__ for e in out] == ["ModerationResult", "GenerationModerated", "GenerationCompleted", "TokenChunk"]
    assert out[0].verdict == "failed" and out[2].finish_reason == "content_filter" and out[2].content == FILTERED_NOTICE


async def test_the_turns_experiment_arm_rides_on_to_the_router() -> None:
    cid = str(uuid.uuid4())
    b = ContextBuilder(CFG, Rows())
    m1, g1 = _turn(cid, 1, None)
    arm = ev.Assignment(experiment="e", arm="slow", overrides=ev.ArmOverrides(pool="medium"))
    await b.handle(m1)
    [req] = await b.handle(replace(g1, experiment=arm))
    assert isinstance(req, ev.InferenceRequested) and req.experiment == arm
