"""The worker's job book without asyncio or an engine: records and events in, actions out."""

from __future__ import annotations

from parley.ids import engine_rid
from schemas.events import InferenceRequested, InferenceRouted, PromptMessage, TokenChunk
from workers.jobs import Abort, Done, JobBook, LookUp, Resend, Run, State
from workers.recovery import Finished, Resume


def routed(request_id: str, attempt: int = 0) -> InferenceRouted:
    request = InferenceRequested(
        conversation_id="c1",
        user_id="u1",
        request_id=request_id,
        parent_id="p1",
        attempt=attempt,
        messages=[PromptMessage(role="user", content="hi")],
    )
    return InferenceRouted(conversation_id="c1", user_id="u1", request=request, pool="small", model="m", partition=0)


def book(capacity: int = 4, max_concurrency: int = 2) -> JobBook:
    return JobBook(capacity=capacity, max_concurrency=max_concurrency, cancel_memory_s=60.0)


def test_records_run_up_to_the_concurrency_and_wait_beyond_it() -> None:
    b = book()
    actions = [a for i in range(3) for a in b.accept(routed(f"r{i}"), 0, i, look_up=False, now=0.0)]
    assert [type(a) for a in actions] == [Run, Run]
    assert (b.running, b.queued, b.held, b.free_slots) == (2, 1, 3, 1)
    first = actions[0].job
    after = b.ended(first, finished=True)
    assert after[0] == Done(0, 0)
    assert isinstance(after[1], Run) and after[1].job.request_id == "r2"
    assert (b.running, b.queued, b.held, b.finished_count) == (2, 0, 2, 1)


def test_a_second_record_of_an_attempt_held_or_closed_is_done_at_once() -> None:
    b = book()
    (run,) = b.accept(routed("r1"), 0, 0, look_up=False, now=0.0)
    assert b.accept(routed("r1"), 0, 1, look_up=False, now=0.0) == [Done(0, 1)]
    b.ended(run.job, finished=True)
    assert b.accept(routed("r1"), 0, 2, look_up=False, now=0.0) == [Done(0, 2)]
    assert b.accept(routed("r1", attempt=1), 0, 3, look_up=False, now=0.0)[0].job.rid == engine_rid("r1", 1)
    assert b.duplicates_skipped == 2


def test_cancels_close_queued_jobs_without_a_slot_abort_running_ones_and_wait_for_late_ones() -> None:
    b = book(max_concurrency=1)
    (running,) = b.accept(routed("busy"), 0, 0, look_up=False, now=0.0)
    assert b.accept(routed("waiting"), 0, 1, look_up=False, now=0.0) == []
    (closing,) = b.cancel("waiting", "user", now=1.0)
    assert isinstance(closing, Run) and closing.job.cancel_reason == "user" and not closing.job.engine_slot
    assert b.cancel("busy", "user", now=1.0) == [Abort(running.job)]
    assert b.cancel("busy", "user", now=1.0) == []  # already cancelled
    b.cancel("late", "moderation", now=2.0)
    (late,) = b.accept(routed("late"), 0, 2, look_up=False, now=3.0)
    assert isinstance(late, Run) and late.job.cancel_reason == "moderation" and not late.job.engine_slot
    assert b.accept(routed("later"), 0, 3, look_up=False, now=100.0) == []  # the memory expired: it queues


def test_an_inherited_record_is_looked_up_then_resent_resumed_or_queued() -> None:
    b = book()
    (look,) = b.accept(routed("done"), 0, 0, look_up=True, now=0.0)
    assert isinstance(look, LookUp) and look.job.state is State.LOOKING_UP and b.running == 0
    final = TokenChunk(conversation_id="c1", user_id="u1", request_id="done", attempt=0, seq=3, text="", tokens=0)
    (resend,) = b.recovered(look.job, Finished(missing=(final,)), now=0.0)
    assert resend == Resend(look.job, (final,))
    assert b.ended(look.job, finished=True) == [Done(0, 0)]

    (look,) = b.accept(routed("partial"), 0, 1, look_up=True, now=0.0)
    (run,) = b.recovered(look.job, Resume(attempt=2, text="Once upon", tokens=3), now=0.0)
    job = run.job
    assert (job.rid, job.routed.request.resume_text, job.resume_tokens) == (engine_rid("partial", 2), "Once upon", 3)


def test_abandoned_and_dropped_jobs_never_finish_and_a_drain_forgets_what_never_started() -> None:
    b = book(capacity=8, max_concurrency=1)
    (run,) = b.accept(routed("a"), 0, 0, look_up=False, now=0.0)
    b.accept(routed("b"), 1, 0, look_up=False, now=0.0)
    (look,) = b.accept(routed("c"), 1, 1, look_up=True, now=0.0)
    assert {j.request_id for j in b.abandon([1])} == {"b", "c"}
    assert b.recovered(look.job, Resume(attempt=1, text="", tokens=0), now=0.0) == []
    assert b.partitions() == {0}
    b.dropped(run.job)
    assert b.ended(run.job, finished=True) == [] and b.running == 0

    b.accept(routed("d"), 0, 1, look_up=False, now=0.0)
    b.accept(routed("e"), 0, 2, look_up=False, now=0.0)
    b.drain()
    assert (b.held, b.queued, b.draining) == (1, 0, True)
    assert b.accept(routed("f"), 0, 3, look_up=False, now=0.0) == []
