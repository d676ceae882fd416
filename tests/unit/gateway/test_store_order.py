"""The gateway's message order (gateway/store.py ``_in_order``): oldest first, depth breaking a shared millisecond."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from gateway.store import MessageRow, _in_order

T0 = datetime(2026, 12, 5, 12, 0, 0)


def row(mid: str, parent: str | None, at: datetime) -> MessageRow:
    return MessageRow(mid, parent, "user", "", None, None, None, None, None, None, at)


def naive(messages: list[MessageRow]) -> list[MessageRow]:
    """The definition: a message's depth is its number of ancestors in the list, walked one by one."""
    parents = {m.id: m.parent_id for m in messages}

    def depth(mid: str | None) -> int:
        d = 0
        while mid is not None and mid in parents and d <= len(parents):
            mid, d = parents[mid], d + 1
        return d

    return sorted(messages, key=lambda m: (m.created_at or datetime.min, depth(m.id), m.id))


def test_a_reply_sharing_its_questions_millisecond_comes_after_it_whatever_the_ids() -> None:
    question, reply = row("z-question", None, T0), row("a-reply", "z-question", T0)
    assert [m.id for m in _in_order([reply, question])] == ["z-question", "a-reply"]


def test_the_order_matches_the_definition_on_random_trees_long_branches_and_missing_parents() -> None:
    rng = random.Random(7)
    for _ in range(200):
        messages: list[MessageRow] = []
        for i in range(rng.randint(1, 60)):
            parent = rng.choice([None, "gone", *[m.id for m in messages[-5:]]]) if messages else None
            messages.append(row(f"m{i:03d}", parent, T0 + timedelta(milliseconds=rng.randint(0, 3))))
        rng.shuffle(messages)
        assert _in_order(messages) == naive(messages)


def test_a_cycle_a_corrupt_row_could_make_still_ends() -> None:
    messages = [row("a", "b", T0), row("b", "a", T0), row("c", None, T0)]
    assert {m.id for m in _in_order(messages)} == {"a", "b", "c"}


def test_one_long_branch_of_thousands_of_messages_is_ordered_along_it() -> None:
    chain = [row(f"m{i:05d}", f"m{i - 1:05d}" if i else None, T0) for i in range(5000)]
    shuffled = chain[:]
    random.Random(1).shuffle(shuffled)
    assert _in_order(shuffled) == chain
