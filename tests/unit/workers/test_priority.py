"""Which engine priority each kind of request gets (workers/priority.py)."""

from __future__ import annotations

from schemas.events import InferenceRequested, Retrieval
from workers import priority
from workers.engine_api import GenerateRequest
from workers.sglang import generate_payload


def turn(tier: str, documents: bool = False) -> InferenceRequested:
    return InferenceRequested(
        conversation_id="c", user_id="u", request_id="r", parent_id="p", tier=tier,
        retrieval=Retrieval(path="hybrid") if documents else None,
    )


def test_interactive_turns_rank_above_document_turns_above_background_and_paid_first() -> None:
    ranks = [
        priority.BACKGROUND,
        priority.of_turn(turn("enterprise", documents=True)),
        priority.of_turn(turn("free")),
        priority.of_turn(turn("plus")),
        priority.of_turn(turn("enterprise")),
        priority.GUARD,
    ]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert priority.of_turn(turn("free", documents=True)) < priority.of_turn(turn("free"))


def test_priority_is_sent_only_when_set() -> None:
    assert generate_payload(GenerateRequest(rid="r", text="", max_new_tokens=1, priority=20))["priority"] == 20
    assert "priority" not in generate_payload(GenerateRequest(rid="r", text="", max_new_tokens=1))
