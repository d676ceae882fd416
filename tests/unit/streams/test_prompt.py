"""Prompt building: the cache-safe layout, budgets in the engine's tokens, the window moving by blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.errors import ConfigError
from schemas.events import PromptMessage
from streams.context_tokens import TokenCounter, load_tokenizer
from streams.prompt import MEMORY_HEADER, SUMMARY_HEADER, Layout, boundaries, build_prompt, choose_window, render, usable
from streams.tree import Message
from workers.chat_template import CHATML, TEMPLATES
from workers.engine.tokenizer import ByteTokenizer

render_message, render_prompt = CHATML.render_message, CHATML.render_prompt

BYTES = TokenCounter.from_spec("bytes")


def _branch(*contents: str) -> list[Message]:
    out, parent = [], None
    for i, text in enumerate(contents):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(Message(f"m{i}", parent, role, text))
        parent = f"m{i}"
    return out


def _layout(budget: int, *, block: int = 1, system: str = "sys", summary: int = 0, memory: tuple[str, ...] = ()) -> Layout:
    return Layout(system_prompt=system, budget_tokens=budget, block_tokens=block, summary_tokens=summary, memory=memory)


def _pm(role: str, content: str) -> PromptMessage:
    return PromptMessage(role=role, content=content)


def test_counts_are_the_engines_tokens_of_the_rendered_prompt() -> None:
    p = build_prompt(_branch("héllo", "a1", "q2"), _layout(10_000), BYTES)
    text = render_prompt(p.messages)
    assert p.prompt_tokens == len(ByteTokenizer().encode(text)) == 1 + len(text.encode("utf-8"))
    # Pieces add up to the whole: the BOS is counted once, not once per message.
    assert BYTES.overhead + sum(BYTES.segment(render_message(m)) for m in p.messages) + BYTES.segment(render_prompt([])) == p.prompt_tokens


def test_everything_fits_system_first_then_chronological() -> None:
    p = build_prompt(_branch("q1", "a1", "q2"), _layout(10_000, system="be nice"), BYTES)
    assert p.messages == [_pm("system", "be nice"), _pm("user", "q1"), _pm("assistant", "a1"), _pm("user", "q2")]
    assert (p.dropped, p.summarised) == (0, False)


def test_layout_is_system_then_memory_in_the_given_order_then_summary_then_turns() -> None:
    branch = _branch("x" * 300, "y" * 300, "q")
    shape = _layout(400, block=100, summary=60, memory=("likes tea", "lives in Oslo"))
    window = choose_window(branch, shape, BYTES)
    assert window.boundary == 2 and window.through_id == "m1"
    p = render(window, shape, BYTES, "they talked about x and y")
    assert p.messages == [
        _pm("system", "sys"),
        _pm("system", MEMORY_HEADER + "- likes tea\n- lives in Oslo"),
        _pm("system", SUMMARY_HEADER + "they talked about x and y"),
        _pm("user", "q"),
    ]
    assert p.summarised and p.dropped == 2 and p.prompt_tokens <= 400
    reordered = render(window, _layout(400, block=100, summary=60, memory=("lives in Oslo", "likes tea")), BYTES)
    assert reordered.messages[1].content == MEMORY_HEADER + "- lives in Oslo\n- likes tea"  # as given, never re-sorted


def test_rendering_is_deterministic() -> None:
    branch = _branch(*(f"turn {i} " * (i + 1) for i in range(21)))
    shape = _layout(700, block=150, summary=80, memory=("b", "a"))
    first = render_prompt(build_prompt(branch, shape, BYTES, "s").messages)
    again = render_prompt(build_prompt(list(branch), shape, TokenCounter.from_spec("bytes"), "s").messages)
    assert first.encode() == again.encode()


def test_block_boundaries_are_user_messages_after_at_least_a_block_of_history() -> None:
    msgs = usable(_branch("a" * 10, "b" * 10, "c" * 10, "d" * 10, "e" * 10, "f" * 10, "g"))
    costs = [10, 10, 10, 10, 10, 10, 1]
    assert boundaries(msgs, costs, 15) == [0, 2, 4, 6]
    assert boundaries(msgs, costs, 25) == [0, 4]  # 30 ≥ 25 at m3, but only a user message starts a turn
    assert boundaries(msgs, costs, 1000) == [0]


def test_the_window_drops_whole_blocks_of_the_oldest_turns_and_honours_the_budget() -> None:
    turn = "w" * 90
    branch = _branch(*([turn] * 20), "question")
    budget = 1000
    shape = _layout(budget, block=250, summary=100)
    window = choose_window(branch, shape, BYTES)
    p = render(window, shape, BYTES, "summary")
    assert p.prompt_tokens <= budget and p.prompt_tokens == BYTES.count(render_prompt(p.messages))
    assert window.start == window.boundary and window.boundary % 2 == 0  # a user message: whole turns go
    assert p.messages[2] == _pm("user", turn)
    # The dropped part is made of blocks of at least block_tokens, and one block less would not fit.
    costs = [BYTES.segment(render_message(_pm(m.role, m.content))) for m in window.usable]
    for a, b in zip(window.bounds, window.bounds[1:]):
        assert sum(costs[a:b]) >= 250
    previous = window.bounds[-2]  # one block less would not fit, counting the summary's reservation
    tail = [_pm(m.role, m.content) for m in window.usable[previous:]]
    assert BYTES.count(render_prompt([_pm("system", "sys"), *tail])) + (100 if previous else 0) > budget


def test_the_summary_reservation_is_kept_only_when_summaries_are_on_and_shown_only_when_turns_are_dropped() -> None:
    branch = _branch(*(["z" * 90] * 20), "q")
    with_reserve = choose_window(branch, _layout(1000, block=50, summary=300), BYTES)
    without = choose_window(branch, _layout(1000, block=50, summary=0), BYTES)
    assert 0 < without.start < with_reserve.start  # the reservation costs recent turns
    short = build_prompt(_branch("short", "a", "q"), _layout(1000, block=50, summary=300), BYTES, "a summary of nothing")
    assert not short.summarised and all(not m.content.startswith(SUMMARY_HEADER) for m in short.messages)


def test_the_question_is_kept_even_when_it_alone_exceeds_the_budget() -> None:
    p = build_prompt(_branch("earlier", "reply", "z" * 4000), _layout(50), BYTES)
    assert p.messages == [_pm("system", "sys"), _pm("user", "z" * 4000)]
    assert p.prompt_tokens > 50


def test_a_very_long_recent_message_drops_more_than_the_blocks_but_keeps_a_contiguous_tail() -> None:
    branch = _branch("short", "y" * 400, "q")
    p = build_prompt(branch, _layout(100, block=1000), BYTES)
    assert [m.content for m in p.messages] == ["sys", "q"]
    assert p.prompt_tokens <= 100


def test_replies_without_text_are_left_out() -> None:
    branch = _branch("q1", "", "q2")  # the first reply failed with no text
    p = build_prompt(branch, _layout(1000, system=""), BYTES)
    assert [(m.role, m.content) for m in p.messages] == [("user", "q1"), ("user", "q2")]


def test_no_system_prompt_and_no_memory_means_no_system_message() -> None:
    assert build_prompt(_branch("q"), _layout(100, system=""), BYTES).messages == [_pm("user", "q")]


def _hf_dir(tmp: Path) -> Path:
    """A small BPE tokenizer, saved as a HuggingFace model directory (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"])
    corpus = ["the user asks about caching prefixes", "the assistant answers with care", "system user assistant"] * 50
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "unk_token": "<unk>"}'
    )
    return tmp


def test_a_huggingface_tokenizer_counts_the_whole_rendered_prompt_under_the_budget(tmp_path: Path) -> None:
    counter = TokenCounter.from_spec(str(_hf_dir(tmp_path)))
    branch = _branch(*(f"the user asks about caching prefixes {i}" if i % 2 == 0 else "the assistant answers" for i in range(41)))
    for budget in (60, 120, 250, 400):
        p = build_prompt(branch, _layout(budget, block=budget // 4), counter)
        assert p.prompt_tokens == counter.count(render_prompt(p.messages)) <= budget
        assert p.messages[-1].content == branch[-1].content
    assert counter.count("the user") < len("the user")  # merges: these are not bytes


def test_an_unknown_tokenizer_setting_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="PARLEY_CONTEXT_TOKENIZER"):
        load_tokenizer("/no/such/model")
    assert load_tokenizer("words").encode("two words") != []


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_every_familys_prompt_is_counted_whole_under_the_budget(family: str) -> None:
    """The segments are estimates outside ChatML (a first system block, hoisted system messages); the count is not."""
    counter = TokenCounter(ByteTokenizer(), TEMPLATES[family])
    branch = _branch(*(f"question {i} " * 3 if i % 2 == 0 else f"answer {i} " * 5 for i in range(41)))
    for budget in (300, 600, 1200):
        p = build_prompt(branch, _layout(budget, block=budget // 4), counter)
        assert p.prompt_tokens == counter.count(TEMPLATES[family].render_prompt(p.messages)) <= budget
        assert p.messages[-1].content == branch[-1].content
