"""The coalescer: first text at once, then a piece per max_tokens or max_delay, never text lost."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.coalesce import Coalescer, Piece

DELAY = 0.030
TOKENS = 16


def test_first_text_goes_out_at_once() -> None:
    c = Coalescer(DELAY, TOKENS)
    assert c.add("Hel", 1, now=5.0) == Piece(seq=0, text="Hel", tokens=1, offset_chars=0)
    assert c.due_at is None and not c.held


def test_text_is_held_until_the_delay_since_the_last_piece() -> None:
    c = Coalescer(DELAY, TOKENS)
    c.add("a", 1, now=0.0)
    assert c.add("b", 1, now=0.010) is None
    assert c.add("c", 1, now=0.020) is None
    assert c.due_at == DELAY
    assert c.poll(now=0.029) is None
    assert c.poll(now=0.030) == Piece(seq=1, text="bc", tokens=2, offset_chars=1)
    assert c.poll(now=1.0) is None  # nothing held


def test_a_delta_after_a_quiet_spell_goes_out_at_once() -> None:
    c = Coalescer(DELAY, TOKENS)
    c.add("a", 1, now=0.0)
    assert c.add("b", 1, now=0.5) == Piece(seq=1, text="b", tokens=1, offset_chars=1)


def test_enough_tokens_send_a_piece_before_the_delay() -> None:
    c = Coalescer(DELAY, 4)
    c.add("x", 1, now=0.0)
    assert c.add("ab", 2, now=0.001) is None
    assert c.add("cd", 2, now=0.002) == Piece(seq=1, text="abcd", tokens=4, offset_chars=1)


def test_tokens_without_text_ride_with_the_next_text() -> None:
    c = Coalescer(DELAY, TOKENS)
    assert c.add("", 1, now=0.0) is None  # nothing to show yet: not the "first piece"
    assert c.due_at is None
    assert c.add("hi", 1, now=0.001) == Piece(seq=0, text="hi", tokens=2, offset_chars=0)


def test_flush_sends_what_is_held_and_only_that() -> None:
    c = Coalescer(DELAY, TOKENS)
    assert c.flush(now=0.0) is None
    c.add("a", 1, now=0.0)
    c.add("bcd", 3, now=0.001)
    assert c.flush(now=0.002) == Piece(seq=1, text="bcd", tokens=3, offset_chars=1)
    assert c.flush(now=0.003) is None
    assert c.next_seq == 2 and c.chars == 4


def test_a_resumed_attempt_counts_characters_after_its_resume_text() -> None:
    c = Coalescer(DELAY, TOKENS, start_chars=7)
    assert c.add("x", 1, now=0.0) == Piece(seq=0, text="x", tokens=1, offset_chars=7)
    assert c.chars == 8


deltas = st.lists(
    st.tuples(st.text(max_size=6), st.integers(0, 5), st.floats(0, 0.1, allow_nan=False)),
    max_size=60,
)


@given(deltas, st.integers(1, 20), st.sampled_from([0.0, 0.01, 0.03]))
def test_driven_like_the_worker_nothing_is_lost_and_nothing_waits_too_long(
    script: list[tuple[str, int, float]], max_tokens: int, delay: float
) -> None:
    """The worker polls at due_at when no delta comes first; so does this driver."""
    c = Coalescer(delay, max_tokens)
    pieces: list[tuple[float, Piece]] = []
    arrivals: list[tuple[int, float]] = []  # (char index of a delta's first char, its arrival time)
    now = 0.0
    sent_chars = 0
    for text, tokens, gap in script:
        now += gap
        while (due := c.due_at) is not None and due <= now:
            pieces.append((due, c.poll(due)))  # type: ignore[arg-type]
        if text:
            arrivals.append((sent_chars, now))
            sent_chars += len(text)
        if (piece := c.add(text, tokens, now)) is not None:
            pieces.append((now, piece))
    if (piece := c.flush(now)) is not None:
        pieces.append((now, piece))

    assert "".join(p.text for _, p in pieces) == "".join(t for t, _, _ in script)
    assert [p.seq for _, p in pieces] == list(range(len(pieces)))
    assert all(p.text for _, p in pieces)
    offset = 0
    for _, p in pieces:
        assert p.offset_chars == offset
        offset += len(p.text)
    # Every delta's text went out within `delay` of its arrival; the first text at once.
    for char, arrived in arrivals:
        sent_at = _sent_at(pieces, char)
        assert arrived <= sent_at <= arrived + delay + 1e-9
    if arrivals:
        assert pieces[0][0] == arrivals[0][1]


def _sent_at(pieces: list[tuple[float, Piece]], char: int) -> float:
    return next(at for at, p in pieces if p.offset_chars <= char < p.offset_chars + len(p.text))
