"""The turn fold: events of five topics → one record per generation, whatever order they arrive in."""

from __future__ import annotations

import dataclasses
import random

from parley import ids
from schemas import events as ev
from tools.analysts import sample, turns

CID = "11111111-1111-4111-8111-111111111111"
USER = "u1"


def _turn_events(cmid: str = "m1", *, ask: str | None = None, text: str = "hello?", shed: bool = False, at: int = 1_000_000):
    user_mid = ids.user_message_id(CID, cmid)
    rid = ids.reply_id(CID, ask or cmid)
    common = {"conversation_id": CID, "user_id": USER}
    prompt = [ev.PromptMessage(role="system", content="sys"), ev.PromptMessage(role="user", content=text)]
    req = ev.InferenceRequested(**common, request_id=rid, parent_id=user_mid, messages=prompt, prompt_tokens=12,
                                budget_tokens=3072, max_tokens=40, tier="free", occurred_at=at + 2)
    out: list[ev.Event] = []
    if ask is None:
        out.append(ev.MessagePosted(**common, message_id=user_mid, client_message_id=cmid, content=text, occurred_at=at))
    out += [
        ev.GenerationRequested(**common, request_id=rid, parent_id=user_mid, client_message_id=ask or cmid, tier="free", occurred_at=at + 1),
        req,
    ]
    if shed:
        out.append(ev.GenerationCompleted(**common, request_id=rid, parent_id=user_mid, finish_reason="rejected", pool="small",
                                          model="m-small", error_code="overloaded", occurred_at=at + 3))
        return rid, out
    usage = ev.Usage(prompt_tokens=14, cached_tokens=6, completion_tokens=20)
    out += [
        ev.InferenceRouted(**common, request=req, pool="small", model="m-small", partition=3, route_reason="downgraded",
                           downgraded_from="medium", occurred_at=at + 3),
        ev.GenerationCompleted(**common, request_id=rid, parent_id=user_mid, finish_reason="stop", content="hi there",
                               usage=usage, pool="small", model="m-small", replica="w0", occurred_at=at + 4),
        ev.UsageRecorded(**common, request_id=rid, pool="small", model="m-small", replica="w0", usage=usage, queue_ms=3.0,
                         ttft_ms=50.0, duration_ms=500.0, occurred_at=at + 5),
    ]
    return rid, out


def test_a_served_turn_has_every_field_from_its_events() -> None:
    rid, events = _turn_events()
    (t,) = turns.fold(events)
    assert (t.request_id, t.kind, t.tier, t.user_message, t.requested_at, t.completed_at) == (rid, "message", "free", "hello?", 1_000_001, 1_000_004)
    assert t.prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello?"}]
    assert (t.pool, t.model, t.replica, t.partition, t.route_reason) == ("small", "m-small", "w0", 3, "downgraded")
    assert t.downgraded and t.downgraded_from == "medium" and not t.shed
    assert (t.prompt_tokens, t.cached_tokens, t.completion_tokens, t.cache, t.cache_ratio) == (14, 6, 20, "hit", round(6 / 14, 6))
    assert (t.ttft_ms, t.queue_ms, t.duration_ms, t.tokens_per_s) == (50.0, 3.0, 500.0, 40.0)
    assert (t.finish_reason, t.content, t.attempts) == ("stop", "hi there", 1)


def test_a_shed_turn_is_rejected_overloaded_and_never_reached_an_engine() -> None:
    _, events = _turn_events(shed=True)
    (t,) = turns.fold(events)
    assert t.shed and (t.finish_reason, t.error_code, t.pool) == ("rejected", "overloaded", "small")
    assert t.cache is None and t.ttft_ms is None and t.route_reason == "" and t.prompt[-1]["content"] == "hello?"


def test_a_regenerate_is_told_apart_from_a_post() -> None:
    _, first = _turn_events("m1")
    rid2, again = _turn_events("m1", ask="regen-1", at=2_000_000)
    out = {t.request_id: t for t in turns.fold(first + again)}
    assert out[rid2].kind == "regenerate" and out[rid2].user_message == "hello?"
    assert [t.kind for t in sorted(out.values(), key=lambda t: t.requested_at)] == ["message", "regenerate"]


def test_order_and_duplicates_do_not_change_the_result() -> None:
    log = [s.event for s in sample.session(6, 5)]
    expected = turns.fold(log)
    shuffled = log + log[::3]  # at-least-once: some delivered twice
    random.Random(1).shuffle(shuffled)
    assert turns.fold(shuffled) == expected
    assert len(expected) == sum(isinstance(e, ev.GenerationRequested) for e in log)


def test_a_later_attempt_wins_and_attempts_are_counted() -> None:
    rid, events = _turn_events()
    gr = next(e for e in events if isinstance(e, ev.GenerationCompleted))
    failed = ev.GenerationCompleted(conversation_id=CID, user_id=USER, request_id=rid, parent_id=gr.parent_id, attempt=0,
                                    finish_reason="failed", occurred_at=999)
    retried = [e for e in events if not isinstance(e, (ev.GenerationCompleted, ev.UsageRecorded))]
    second = ev.GenerationCompleted(conversation_id=CID, user_id=USER, request_id=rid, parent_id=gr.parent_id, attempt=1,
                                    finish_reason="stop", content="second", occurred_at=1_000_010)
    (t,) = turns.fold([*retried, failed, second])
    assert (t.attempts, t.finish_reason, t.content) == (2, "stop", "second")


def test_the_window_keeps_turns_asked_for_inside_it() -> None:
    _, a = _turn_events("m1", at=1_000_000)
    _, b = _turn_events("m2", at=5_000_000)
    assert [t.user_message for t in turns.fold(a + b, since_us=2_000_000)] == ["hello?"]
    assert len(turns.fold(a + b, until_us=5_000_002)) == 2  # exclusive: asked for at 5_000_001
    assert turns.fold(a + b, until_us=1_000_001) == []  # asked for at 1_000_001
    assert turns.fold(a + b, user_id="nobody") == []


def test_a_replies_tool_calls_are_traced_without_their_arguments_or_results() -> None:
    rid, events = _turn_events()
    common = {"conversation_id": CID, "user_id": USER, "request_id": rid}
    call = ev.ToolCall(id="call_a", name="add_expense", arguments='{"amount": 12}')
    events += [
        ev.ToolCallDecided(**common, call=call, decision="allow", rule="operator:small"),
        ev.ToolCallStarted(**common, call_id="call_a", name="add_expense", executor="x"),
        ev.ToolCallFinished(**common, call_id="call_a", name="add_expense", outcome="unknown", result="maybe", error="lost",
                            occurred_at=1_500_000),
        ev.ToolCallFinished(**common, call_id="call_a", name="add_expense", outcome="ok", result="later", occurred_at=1_600_000),
        ev.ToolCallDecided(**common, call=ev.ToolCall(id="call_b", name="wipe"), decision="deny", rule="operator:never"),
    ]
    continuation = ev.GenerationRequested(conversation_id=CID, user_id=USER, request_id=ids.reply_id(CID, f"tool:{rid}:continue"),
                                          parent_id="m-tool", client_message_id=f"tool:{rid}:continue", occurred_at=2_000_000)
    first, then = turns.fold([*events, continuation])
    assert turns.fold([continuation, *reversed(events)])[0] == first  # the earliest ending counts, in any order
    assert first.tool_calls == [
        {"id": "call_a", "name": "add_expense", "decision": "allow", "rule": "operator:small", "started": True, "outcome": "unknown", "error": "lost"},
        {"id": "call_b", "name": "wipe", "decision": "deny", "rule": "operator:never", "started": False, "outcome": None, "error": None},
    ]
    assert "12" not in str(first.tool_calls) and "maybe" not in str(first.tool_calls)
    assert then.kind == "tool-results" and then.tool_calls == []


def test_a_replies_rating_is_the_last_one_given_in_any_order_and_never_its_reason() -> None:
    rid, events = _turn_events()
    common = {"conversation_id": CID, "user_id": USER}
    ratings = [
        ev.FeedbackGiven(**common, message_id=rid, rating="down", reason="wrong", occurred_at=2_000_000),
        ev.FeedbackGiven(**common, message_id=rid, rating="up", occurred_at=2_000_001),
    ]
    for log in (events + ratings, ratings[::-1] + events):
        (t,) = turns.fold(log)
        assert t.feedback == "up" and "wrong" not in repr(t.to_record())
    taken_back = ev.FeedbackGiven(**common, message_id=rid, rating="", occurred_at=2_000_002)
    assert turns.fold(events + ratings + [taken_back])[0].feedback is None
    assert turns.fold(events)[0].feedback is None


def test_a_turn_carries_the_experiment_and_arm_its_request_was_stamped_with() -> None:
    rid, events = _turn_events()
    arm = ev.Assignment(experiment="ttft-test", arm="slow", overrides=ev.ArmOverrides(pool="medium"))
    events = [dataclasses.replace(e, experiment=arm) if isinstance(e, ev.GenerationRequested) else e for e in events]
    (t,) = turns.fold(events)
    assert (t.experiment, t.arm) == ("ttft-test", "slow")
    (plain,) = turns.fold(_turn_events()[1])
    assert (plain.experiment, plain.arm) == (None, None)
