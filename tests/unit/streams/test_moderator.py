"""The moderation processor's core: windows, input and output checks, restarts, and what a flag emits."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from moderation.categories import CATEGORIES
from moderation.classifier import Scores
from moderation.policy import policy_from
from schemas import events as ev
from streams.moderator import Checker, Moderator, Turn, Windows
from streams.tree import Conversation, Message, frozen_messages

BAD = "forbidden-words"


class WordClassifier:
    """Scores ``violence`` 0.99 for any text holding BAD: the core's logic, not a model, is under test."""

    model = "test-words/1"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        self.seen.extend(texts)
        return [Scores({c: (0.99 if c == "violence" and BAD in t else 0.0) for c in CATEGORIES}) for t in texts]


CID, UID, MID, RID = (
    "00000000-0000-4000-8000-000000000001",
    "u1",
    "00000000-0000-4000-8000-000000000002",
    "00000000-0000-4000-8000-000000000003",
)


def moderator(window: int = 10, overlap: int = 3, stored: Conversation | None = None) -> tuple[Moderator, WordClassifier]:
    classifier = WordClassifier()

    async def load(cid: str) -> Conversation:
        return stored or Conversation(conversation_id=cid)

    return Moderator(Checker(classifier, policy_from("")), load, window_tokens=window, overlap_tokens=overlap, lookup_wait_s=0), classifier


def posted(text: str) -> ev.MessagePosted:
    return ev.MessagePosted(conversation_id=CID, user_id=UID, message_id=MID, role="user", content=text, client_message_id="c")


def requested(tier: str = "free") -> ev.GenerationRequested:
    return ev.GenerationRequested(conversation_id=CID, user_id=UID, request_id=RID, parent_id=MID, client_message_id="c", tier=tier)


def chunk(seq: int, text: str, tokens: int = 1, finish: str | None = None, attempt: int = 0) -> ev.TokenChunk:
    return ev.TokenChunk(
        conversation_id=CID, user_id=UID, request_id=RID, seq=seq, text=text, tokens=tokens, finish_reason=finish, attempt=attempt
    )


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def kinds(events: Sequence[ev.Event]) -> list[str]:
    return [type(e).__name__ for e in events]


# ------------------------------------------------------------------ windows


def test_windows_fall_every_window_tokens_and_reach_back_by_the_overlap() -> None:
    w = Windows(window=4, overlap=2)
    for i in range(4):
        w.add(f"t{i} ", 1)
    assert w.due()
    assert w.take() == (0, 4, "t0 t1 t2 t3 ")
    for i in range(4, 8):
        w.add(f"t{i} ", 1)
    assert w.take() == (2, 8, "t2 t3 t4 t5 t6 t7 ")  # the overlap: two tokens before the window
    assert w.take() is None  # nothing new
    w.add("t8 ", 1)
    assert not w.due() and w.take() == (6, 9, "t6 t7 t8 ")  # the tail, on completion


def test_windows_keep_only_what_the_next_overlap_needs() -> None:
    w = Windows(window=100, overlap=5)
    for i in range(1000):
        w.add("x", 1)
        if w.due():
            w.take()
    assert len(w.pieces) <= 105


def test_window_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="overlap_tokens"):
        moderator(window=10, overlap=10)


# ------------------------------------------------------------------ input


def test_a_clean_input_is_recorded_and_nothing_else() -> None:
    m, _ = moderator()
    assert run(m.on_event(posted("hello there"))) == ()
    out = run(m.on_event(requested()))
    assert kinds(out) == ["ModerationResult"]
    result = out[0]
    assert result.verdict == "clean" and result.direction == "input" and result.message_id == MID and result.text is None
    assert {s.category for s in result.scores} == set(CATEGORIES)


def test_a_flagged_input_stops_the_generation_and_marks_the_turn() -> None:
    m, _ = moderator()
    run(m.on_event(posted(f"say {BAD}")))
    out = run(m.on_event(requested()))
    assert kinds(out) == ["ModerationResult", "GenerationModerated", "GenerationCancelRequested"]
    result, marked, cancel = out
    assert result.verdict == "flagged" and result.categories == ["violence"] and result.action == "cut"
    assert marked.request_id == RID and marked.parent_id == MID and marked.direction == "input" and marked.result_id == result.event_id
    assert cancel.reason == "moderation" and cancel.request_id == RID
    assert run(m.on_chunk(chunk(0, "hi "))) == ()  # its reply is not checked again


def test_an_input_not_seen_posted_is_read_from_the_tree() -> None:
    stored = Conversation(
        conversation_id=CID, messages=frozen_messages({MID: Message(MID, None, "user", f"a {BAD}")})
    )
    m, _ = moderator(stored=stored)
    out = run(m.on_event(requested()))  # a regeneration, or its post came before a restart
    assert out[0].verdict == "flagged"


def test_check_ids_repeat_so_a_recheck_after_restart_is_the_same_record() -> None:
    first, second = moderator()[0], moderator()[0]
    for m in (first, second):
        run(m.on_event(posted("hello")))
    assert run(first.on_event(requested()))[0].event_id == run(second.on_event(requested()))[0].event_id


# ------------------------------------------------------------------ output


def test_a_reply_is_cut_at_the_first_window_that_holds_the_bad_words() -> None:
    m, classifier = moderator(window=10, overlap=3)
    run(m.on_event(posted("hello")))
    run(m.on_event(requested()))
    out: list[ev.Event] = []
    seq = 0
    for i in range(5):
        out += run(m.on_chunk(chunk(seq, f"w{i} ")))
        seq += 1
    out += run(m.on_chunk(chunk(seq, f"{BAD} ")))
    seq += 1
    assert kinds(out) == []  # the window is not full yet
    for i in range(4):
        out += run(m.on_chunk(chunk(seq, f"x{i} ")))
        seq += 1
    assert kinds(out) == ["ModerationResult", "GenerationModerated", "GenerationCancelRequested"]
    assert out[0].stage == "window" and out[0].window_start == 0 and out[0].window_end == 10 and out[0].action == "cut"
    assert run(m.on_chunk(chunk(seq, "more ", finish="content_filter"))) == ()


def test_a_sentence_split_by_a_window_edge_is_seen_through_the_overlap() -> None:
    m, _ = moderator(window=4, overlap=2)
    run(m.on_event(requested()))
    out: list[ev.Event] = []
    for i, text in enumerate(["a ", "b ", "c ", "forbidden", "-words ", "d ", "e ", "f "]):
        out += run(m.on_chunk(chunk(i, text)))
    assert "GenerationCancelRequested" in kinds(out)


def test_the_tail_is_checked_on_the_last_chunk_and_a_flag_then_withdraws_it() -> None:
    m, _ = moderator(window=100, overlap=10)
    run(m.on_event(requested()))
    run(m.on_chunk(chunk(0, "fine ")))
    out = run(m.on_chunk(chunk(1, f"{BAD} ", finish="stop")))
    assert kinds(out) == ["ModerationResult", "GenerationModerated"]  # it ended: nothing to cancel
    assert out[0].stage == "final" and out[1].action == "withdrawn"


def test_a_clean_reply_is_never_touched_and_its_completion_is_not_checked_again() -> None:
    m, classifier = moderator(window=3, overlap=1)
    run(m.on_event(posted("hello")))
    run(m.on_event(requested()))
    out = []
    for i in range(7):
        out += run(m.on_chunk(chunk(i, f"w{i} ", finish="stop" if i == 6 else None)))
    assert {e.verdict for e in out} == {"clean"} and all(isinstance(e, ev.ModerationResult) for e in out)
    checks = len(classifier.seen)
    done = ev.GenerationCompleted(
        conversation_id=CID, user_id=UID, request_id=RID, parent_id=MID, finish_reason="stop", content="w0 w1 w2 w3 w4 w5 w6 "
    )
    assert run(m.on_event(done)) == ()
    assert len(classifier.seen) == checks


def test_a_reply_seen_only_in_part_after_a_restart_is_checked_whole_on_completion() -> None:
    m, _ = moderator(window=100, overlap=10)
    run(m.on_chunk(chunk(7, "late text ")))  # its first chunks went by before this instance started
    done = ev.GenerationCompleted(
        conversation_id=CID, user_id=UID, request_id=RID, parent_id=MID, finish_reason="stop", content=f"early {BAD} late text "
    )
    out = run(m.on_event(done))
    assert kinds(out) == ["ModerationResult", "GenerationModerated"]
    assert out[0].stage == "final" and out[1].parent_id == MID and out[1].action == "withdrawn"


def test_chunks_seen_before_their_request_are_checked_under_the_requests_tier_once_it_comes() -> None:
    # chat.tokens and chat.events are separate agents with separate lag (after a restart, say): a
    # reply's first chunks can come before its GenerationRequested, when its tier is not known yet.
    m, _ = moderator(window=4, overlap=1)
    run(m.on_event(posted("hello")))
    for seq in range(2):
        assert not run(m.on_chunk(chunk(seq, f"w{seq} ")))
    run(m.on_event(requested(tier="enterprise")))
    out: list[ev.Event] = []
    for seq in range(2, 8):
        out += run(m.on_chunk(chunk(seq, f"w{seq} ")))
    checks = [e for e in out if isinstance(e, ev.ModerationResult)]
    assert checks and {c.policy for c in checks} == {"enterprise"}


def test_a_superseded_attempts_late_chunk_is_ignored_and_a_new_attempt_starts_afresh() -> None:
    m, classifier = moderator(window=2, overlap=0)
    run(m.on_event(requested()))
    run(m.on_chunk(chunk(0, "a ", attempt=1)))
    assert run(m.on_chunk(chunk(1, f"{BAD} ", attempt=0))) == ()
    assert BAD not in "".join(classifier.seen)


def test_a_classifier_that_is_down_is_retried_and_no_check_is_skipped() -> None:
    from moderation.classifier import ClassifierUnavailable

    class Flaky(WordClassifier):
        failures = 2

        async def classify(self, texts: Sequence[str]) -> list[Scores]:
            if self.failures:
                self.failures -= 1
                raise ClassifierUnavailable("engine down")
            return await super().classify(texts)

    flaky = Flaky()

    async def load(cid: str) -> Conversation:
        return Conversation(conversation_id=cid)

    m = Moderator(Checker(flaky, policy_from("")), load, window_tokens=10, overlap_tokens=3)
    run(m.on_event(posted(f"a {BAD}")))
    out = run(m.on_event(requested()))
    assert flaky.failures == 0 and out[0].verdict == "flagged"


def test_a_policy_that_retains_flagged_text_keeps_it_redacted() -> None:
    async def load(cid: str) -> Conversation:
        return Conversation(conversation_id=cid)

    policy = policy_from('{"free": {"retain_flagged": true}}')
    m = Moderator(Checker(WordClassifier(), policy, redact=lambda t: t.replace("bob@x.org", "<EMAIL_ADDRESS>")), load, window_tokens=10, overlap_tokens=3)
    run(m.on_event(posted(f"{BAD} bob@x.org")))
    result = run(m.on_event(requested()))[0]
    assert result.verdict == "flagged" and result.text == f"{BAD} <EMAIL_ADDRESS>"


# ------------------------------------------------------------------ no verdict: tried again, then fail closed


class Garbled(WordClassifier):
    """Answers nothing that is a verdict (Llama Guard's garbled answer): every try fails the check."""

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        from moderation.classifier import NotAVerdict

        self.seen.extend(texts)
        raise NotAVerdict("garbled")


def garbled_moderator() -> tuple[Moderator, Garbled]:
    async def load(cid: str) -> Conversation:
        return Conversation(conversation_id=cid)

    garbled = Garbled()
    return Moderator(Checker(garbled, policy_from(""), give_up_s=0.01), load, window_tokens=10, overlap_tokens=3), garbled


def test_an_input_check_with_no_verdict_is_tried_again_then_stops_the_turn() -> None:
    m, garbled = garbled_moderator()
    run(m.on_event(posted("a harmless question")))
    out = run(m.on_event(requested()))
    assert kinds(out) == ["ModerationResult", "GenerationModerated", "GenerationCancelRequested"]
    result, marked, cancel = out
    assert (result.verdict, result.action, result.categories, result.scores, result.text) == ("failed", "cut", [], [], None)
    assert (marked.action, marked.categories, cancel.reason) == ("cut", [], "moderation")
    assert len(garbled.seen) >= 2  # tried again before giving up
    assert run(m.on_chunk(chunk(0, "ok ", finish="stop"))) == ()  # the stopped turn's reply is not checked again


def test_a_reply_window_with_no_verdict_cuts_the_reply_and_a_final_one_withdraws_it() -> None:
    m, _ = garbled_moderator()
    m._turns.put(RID, Turn(CID, UID, RID, MID))  # its input was checked (clean) before the classifier broke
    window = run(m.on_chunk(chunk(0, "x " * 10, tokens=10)))
    assert kinds(window) == ["ModerationResult", "GenerationModerated", "GenerationCancelRequested"]
    assert (window[0].verdict, window[0].stage, window[0].action) == ("failed", "window", "cut")

    m, _ = garbled_moderator()
    m._turns.put(RID, Turn(CID, UID, RID, MID))
    final = run(m.on_chunk(chunk(0, "short reply", tokens=2, finish="stop")))
    assert kinds(final) == ["ModerationResult", "GenerationModerated"]  # it ended: marked, nothing to cancel
    assert (final[0].verdict, final[0].stage, final[0].action, final[1].action) == ("failed", "final", "withdrawn", "withdrawn")


def test_a_continuations_input_is_every_tool_result_of_its_round() -> None:
    """Tool results are untrusted input (DESIGN.md §13): the first of two results holding the flagged text
    stops the continuation that reads them, though its parent is the second."""
    m, classifier = moderator()
    first, second = "00000000-0000-4000-8000-000000000010", "00000000-0000-4000-8000-000000000011"
    for mid, parent, text in ((first, RID, f"page says {BAD}"), (second, first, "a clean result")):
        run(m.on_event(ev.MessagePosted(
            conversation_id=CID, user_id=UID, message_id=mid, parent_id=parent, role="tool", content=text,
            client_message_id=f"tool:{mid}", tool_call_id="call_x",
        )))  # fmt: skip
    continuation = ev.GenerationRequested(
        conversation_id=CID, user_id=UID, request_id="00000000-0000-4000-8000-000000000012", parent_id=second,
        client_message_id="tool:continue",
    )
    out = run(m.on_event(continuation))
    assert kinds(out) == ["ModerationResult", "GenerationModerated", "GenerationCancelRequested"]
    assert any(BAD in t and "a clean result" in t for t in classifier.seen)
