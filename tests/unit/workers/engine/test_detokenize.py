"""Incremental detokenization: each update returns what became sendable; together they only ever grow."""

from __future__ import annotations

from workers.engine.detokenize import IncrementalText
from workers.engine.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def feed(text: IncrementalText, ids: list[int]) -> list[str]:
    """The sendable text after each token: the deltas so far, joined."""
    seen, sent = [], ""
    for n in range(1, len(ids) + 1):
        sent += text.update(ids[:n], final=n == len(ids))
        seen.append(sent)
    return seen


def test_split_multibyte_character_is_held_back_until_complete() -> None:
    ids = list("a€b".encode("utf-8"))  # € is three bytes
    seen = feed(IncrementalText(TOK.decode), ids)
    assert seen == ["a", "a", "a", "a€", "a€b"]
    assert all(later.startswith(earlier) for earlier, later in zip(seen, seen[1:]))


def test_stop_string_is_cut_and_its_prefix_never_sent() -> None:
    ids = list(b"ok\n\nUser: more")
    text = IncrementalText(TOK.decode, stop=("\n\nUser:",))
    seen = feed(text, ids)
    assert text.matched == "\n\nUser:"
    assert seen[-1] == "ok"
    assert all(s == "ok" or "ok".startswith(s) for s in seen)  # "\n" was never sent before the cut


def test_stop_string_kept_with_no_stop_trim() -> None:
    text = IncrementalText(TOK.decode, stop=("END",), keep_stop=True)
    assert feed(text, list(b"xENDy"))[-1] == "xEND"


def test_partial_stop_is_released_when_it_does_not_complete() -> None:
    text = IncrementalText(TOK.decode, stop=("\n\n",))
    assert feed(text, list(b"a\nb")) == ["a", "a", "a\nb"]
    assert text.matched is None


def test_invalid_bytes_do_not_stall_the_text() -> None:
    text = IncrementalText(TOK.decode)
    seen = feed(text, [0xFF, ord("a"), ord("b")])
    assert seen[-1] == "\ufffdab"


def test_earliest_stop_string_wins_across_updates() -> None:
    text = IncrementalText(TOK.decode, stop=("cd", "bc"))
    assert feed(text, list(b"abcd"))[-1] == "a"
    assert text.matched == "bc"


def test_a_stop_string_split_across_many_updates_is_found() -> None:
    text = IncrementalText(TOK.decode, stop=("<|end|>",))
    seen = feed(text, list(b"x<|en<|end|>tail"))
    assert text.matched == "<|end|>" and seen[-1] == "x<|en"
