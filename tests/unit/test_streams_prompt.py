"""Prompt building: system prompt first, newest turns kept under the budget, chronological output."""

from __future__ import annotations

from schemas.events import PromptMessage
from streams.prompt import MESSAGE_OVERHEAD_TOKENS, build_prompt, estimate_tokens, message_tokens
from streams.tree import Message


def _branch(*contents: str) -> list[Message]:
    out, parent = [], None
    for i, text in enumerate(contents):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(Message(f"m{i}", parent, role, text))
        parent = f"m{i}"
    return out


def test_estimate_is_about_four_characters_a_token_rounded_up() -> None:
    assert [estimate_tokens(s) for s in ("", "a", "abcd", "abcde", "x" * 400)] == [0, 1, 1, 2, 100]
    assert message_tokens("user", "abcd") == 1 + MESSAGE_OVERHEAD_TOKENS


def test_everything_fits_system_first_then_chronological() -> None:
    p = build_prompt("be nice", _branch("q1", "a1", "q2"), budget_tokens=1000)
    assert p.messages == [
        PromptMessage(role="system", content="be nice"),
        PromptMessage(role="user", content="q1"),
        PromptMessage(role="assistant", content="a1"),
        PromptMessage(role="user", content="q2"),
    ]
    assert p.prompt_tokens == sum(message_tokens(m.role, m.content) for m in p.messages)
    assert p.dropped == 0


def test_budget_keeps_the_newest_turns_and_drops_the_oldest() -> None:
    turn = "x" * 40  # 10 tokens + overhead = 14
    branch = _branch("old " + turn, turn, turn, "newest " + turn)
    system_cost = message_tokens("system", "sys")
    budget = system_cost + 3 * message_tokens("user", turn) + 3  # room for the newest three only
    p = build_prompt("sys", branch, budget_tokens=budget)
    assert [m.content for m in p.messages] == ["sys", turn, turn, "newest " + turn]
    assert p.prompt_tokens <= budget
    assert p.dropped == 1


def test_selection_is_a_contiguous_tail_even_if_an_older_short_message_would_fit() -> None:
    branch = _branch("short", "y" * 400, "q")
    p = build_prompt("", branch, budget_tokens=message_tokens("user", "q") + message_tokens("user", "short") + 1)
    assert [m.content for m in p.messages] == ["q"]


def test_the_question_is_kept_even_when_it_alone_exceeds_the_budget() -> None:
    p = build_prompt("sys", _branch("earlier", "reply", "z" * 4000), budget_tokens=50)
    assert [m.content for m in p.messages] == ["sys", "z" * 4000]
    assert p.prompt_tokens > 50


def test_replies_without_text_are_left_out() -> None:
    branch = _branch("q1", "", "q2")  # the first reply failed with no text
    p = build_prompt("", branch, budget_tokens=1000)
    assert [(m.role, m.content) for m in p.messages] == [("user", "q1"), ("user", "q2")]


def test_no_system_prompt_means_no_system_message() -> None:
    p = build_prompt("", _branch("q"), budget_tokens=100)
    assert p.messages == [PromptMessage(role="user", content="q")]
