"""The closing events of a generation: what each carries, and how engine endings map to them."""

from __future__ import annotations

from schemas.events import GenerationCompleted, InferenceRequested, InferenceRouted, TokenChunk, Usage, UsageRecorded
from workers.engine_api import EngineRejected, EngineUnavailable
from workers.outcome import Outcome, from_engine_finish, from_error, terminal_events


def _routed(resume_text: str = "", attempt: int = 0) -> InferenceRouted:
    request = InferenceRequested(
        conversation_id="c1",
        user_id="u1",
        trace_id="t1",
        request_id="req-1",
        parent_id="msg-1",
        attempt=attempt,
        tier="plus",
        resume_text=resume_text,
    )
    return InferenceRouted(
        conversation_id="c1", user_id="u1", trace_id="t1", request=request, pool="small", model="m", partition=2
    )


def test_events_come_in_the_contract_order_with_ids_and_usage() -> None:
    usage = Usage(prompt_tokens=12, cached_tokens=8, completion_tokens=3)
    outcome = Outcome(finish_reason="stop", text="abc", usage=usage, ttft_ms=5.0, duration_ms=9.0)
    completed, final, recorded = terminal_events(
        _routed(), outcome, seq=2, offset_chars=3, replica="w1", model="qwen", queue_ms=4.0
    )
    assert isinstance(completed, GenerationCompleted) and isinstance(final, TokenChunk)
    assert isinstance(recorded, UsageRecorded)
    assert (completed.request_id, completed.parent_id, completed.content) == ("req-1", "msg-1", "abc")
    assert (completed.pool, completed.model, completed.replica, completed.usage) == ("small", "qwen", "w1", usage)
    assert completed.error_code is None
    assert (final.seq, final.text, final.offset_chars, final.finish_reason, final.usage) == (2, "", 3, "stop", usage)
    assert (recorded.tier, recorded.queue_ms, recorded.ttft_ms, recorded.duration_ms) == ("plus", 4.0, 5.0, 9.0)
    assert recorded.key == b"u1"  # chat.usage is keyed by user
    assert {e.trace_id for e in (completed, final, recorded)} == {"t1"}
    assert {e.conversation_id for e in (completed, final, recorded)} == {"c1"}


def test_a_resumed_attempt_reports_the_whole_reply() -> None:
    completed, final, _ = terminal_events(
        _routed(resume_text="Once ", attempt=1),
        Outcome(finish_reason="length", text="upon"),
        seq=1,
        offset_chars=9,
        replica="w",
        model="m",
        queue_ms=-3.0,
    )
    assert completed.content == "Once upon" and completed.attempt == 1 and final.attempt == 1


def test_failures_carry_the_error_on_both_completed_and_final_chunk() -> None:
    outcome = Outcome(finish_reason="failed", error_code="engine_unavailable", error_message="down")
    completed, final, recorded = terminal_events(
        _routed(), outcome, seq=0, offset_chars=0, replica="w", model="m", queue_ms=-1.0
    )
    assert (completed.error_code, completed.error_message) == ("engine_unavailable", "down")
    assert (final.error_code, final.error_message, final.finish_reason) == ("engine_unavailable", "down", "failed")
    assert recorded.finish_reason == "failed" and recorded.queue_ms == 0.0  # clock skew never goes negative


def test_engine_endings_map_to_finish_reasons_and_codes() -> None:
    assert from_engine_finish("stop", None) == ("stop", None, None)
    assert from_engine_finish("length", None) == ("length", None, None)
    assert from_engine_finish("cancelled", None) == ("cancelled", None, None)
    reason, code, message = from_engine_finish("failed", "CUDA OOM")
    assert (reason, code) == ("failed", "engine_failed") and "CUDA OOM" in (message or "")
    assert from_engine_finish("exploded", None)[:2] == ("failed", "engine_protocol")
    assert from_error(EngineUnavailable("refused"))[0] == "engine_unavailable"
    assert from_error(EngineRejected("too long"))[0] == "engine_rejected"
    code, message = from_error(KeyError("secret prompt text"))
    assert code == "worker_error" and "secret" not in message  # never echo an exception that may hold text


def test_a_cancel_turns_an_aborted_failure_into_cancelled_but_keeps_a_natural_end() -> None:
    failed = Outcome(finish_reason="failed", text="par", error_code="engine_failed", error_message="aborted")
    assert failed.as_cancelled() == Outcome(finish_reason="cancelled", text="par")
    done = Outcome(finish_reason="stop", text="all")
    assert done.as_cancelled() is done


def test_a_cancel_by_moderation_ends_content_filter_and_drops_the_text() -> None:
    aborted = Outcome(finish_reason="cancelled", text="bad words")
    assert aborted.as_cancelled("moderation") == Outcome(finish_reason="content_filter", text="")
    done = Outcome(finish_reason="stop", text="all of it")
    assert done.as_cancelled("moderation") is done  # it ended first: moderation withdraws it afterwards


def test_an_engines_grammar_error_keeps_its_kind_and_never_the_schema_it_quotes() -> None:
    code, message = from_error(EngineRejected('Invalid grammar request: json_schema cannot be read: at "secret_field_name"'))
    assert "json_schema" in message and "secret_field_name" not in message
    assert "max_new_tokens must be" in from_error(EngineRejected("max_new_tokens must be at least 0, got -1."))[1]
