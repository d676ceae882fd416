"""The worker core without Kafka: the Scheduler drives the in-memory engine and an in-memory sink.

The sink acknowledges each event one event-loop step after it was produced,
like a broker would, and logs both, so the tests can check the contract
order: every chunk, then GenerationCompleted and UsageRecorded committed
together (one transaction) before the final chunk is produced, and only then
on_finished.
"""

from __future__ import annotations

from schemas.endings import FILTERED_NOTICE

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from parley.ids import engine_rid
from parley.errors import StoreUnavailable
from parley.kafka import ProduceFailed
from schemas.codec import InvalidEvent
from schemas.events import (
    Event,
    GenerationCompleted,
    InferenceRequested,
    InferenceRouted,
    PromptMessage,
    Sampling,
    TokenChunk,
    ToolCall,
    ToolFunction,
    Tools,
    UsageRecorded,
    now_us,
)
from workers.chat_template import CHATML, DEEPSEEK, LLAMA3, ChatTemplate
from workers.engine_api import EngineDelta, EngineLoad, GenerateRequest
from workers.tool_calls import call_id, forced_schema
from workers.engine_health import PROBE_S
from workers.scheduler import Scheduler
from workers.scripted import ScriptedEngine, scripted_reply
from workers.settings import WorkerSettings
from workers.transactions import ClosingRefused

SETTINGS = WorkerSettings(worker_id="w-test", max_concurrency=4, max_queued=2, cancel_memory_s=60.0)


class MemorySink:
    def __init__(self) -> None:
        self.log: list[tuple[str, Event]] = []
        self.failures: dict[type[Event], int] = {}  # event type → how many sends of it fail first
        self.refuse: Callable[[Event], Exception | None] = lambda e: None  # a commit of e raises this at once

    def send_nowait(self, event: Event) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.log.append(("produce", event))

        def ack() -> None:
            if self.failures.get(type(event), 0) > 0:
                self.failures[type(event)] -= 1
                fut.set_exception(ProduceFailed("broker away"))
            else:
                self.log.append(("ack", event))
                fut.set_result(None)

        loop.call_soon(ack)
        return fut

    async def send(self, event: Event) -> Any:
        return await self.send_nowait(event)

    async def commit(self, events: Sequence[Event]) -> None:
        """All or none, like a transaction: each logged as produced, then all acknowledged together."""
        for e in events:
            refused = self.refuse(e)
            if refused is not None:
                raise refused
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.log.extend(("produce", e) for e in events)
        failing = [e for e in events if self.failures.get(type(e), 0) > 0]

        def ack() -> None:
            if failing:
                for e in failing:
                    self.failures[type(e)] -= 1
                fut.set_exception(ProduceFailed("broker away"))
            else:
                self.log.extend(("ack", e) for e in events)
                fut.set_result(None)

        loop.call_soon(ack)
        await fut

    def acked(self, request_id: str) -> list[Event]:
        return [e for what, e in self.log if what == "ack" and getattr(e, "request_id", None) == request_id]

    def index(self, what: str, event: Event) -> int:
        return next(i for i, (w, e) in enumerate(self.log) if w == what and e is event)


class Harness:
    def __init__(self, settings: WorkerSettings = SETTINGS, engine: ScriptedEngine | None = None, **kw: Any) -> None:
        self.engine = engine or ScriptedEngine(model="scripted-1")
        self.sink = MemorySink()
        self.finished: list[tuple[int, int]] = []
        self.sink_at_finish: dict[tuple[int, int], int] = {}
        self.scheduler = Scheduler(settings, self.engine, self.sink, self._on_finished, model="scripted-1", **kw)

    def _on_finished(self, partition: int, offset: int) -> None:
        self.finished.append((partition, offset))
        self.sink_at_finish[(partition, offset)] = len(self.sink.log)

    def completed(self, request_id: str) -> GenerationCompleted:
        return next(e for e in self.sink.acked(request_id) if isinstance(e, GenerationCompleted))

    def chunks(self, request_id: str) -> list[TokenChunk]:
        return [e for e in self.sink.acked(request_id) if isinstance(e, TokenChunk)]


def routed(
    request_id: str, content: str = "hello", *, attempt: int = 0, max_tokens: int = 512, resume_text: str = ""
) -> InferenceRouted:
    request = InferenceRequested(
        conversation_id=f"c-{request_id}",
        user_id="u1",
        request_id=request_id,
        parent_id=f"p-{request_id}",
        attempt=attempt,
        messages=[PromptMessage(role="system", content="sys"), PromptMessage(role="user", content=content)],
        max_tokens=max_tokens,
        resume_text=resume_text,
    )
    return InferenceRouted(
        conversation_id=request.conversation_id,
        user_id="u1",
        request=request,
        pool="small",
        model="pool-model",
        partition=0,
        occurred_at=now_us() - 5_000,
    )


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for a state, not for a time: fails only if it never comes."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.001)


async def test_a_generation_streams_coalesced_chunks_then_closes_in_contract_order() -> None:
    h = Harness(clock=lambda: 0.0)  # time stands still: only the token count and the first chunk send pieces
    h.scheduler.accept(routed("r1", "[[tokens:40]]"), partition=0, offset=7)
    await until(lambda: h.finished == [(0, 7)])

    chunks = h.chunks("r1")
    *stream, final = chunks
    assert [c.tokens for c in stream] == [1, 32, 7]  # the first at once, then per 32 tokens (the default), then the rest
    assert "".join(c.text for c in stream) == scripted_reply(40)
    assert [c.seq for c in chunks] == [0, 1, 2, 3]
    assert [c.offset_chars for c in stream] == [sum(len(c.text) for c in stream[:i]) for i in range(len(stream))]
    assert (final.text, final.finish_reason, final.offset_chars) == ("", "stop", len(scripted_reply(40)))
    assert final.usage is not None and final.usage.completion_tokens == 40
    assert {c.replica for c in chunks} == {"w-test"} and {c.attempt for c in chunks} == {0}

    completed = h.completed("r1")
    assert (completed.finish_reason, completed.content) == ("stop", scripted_reply(40))
    assert (completed.pool, completed.model, completed.replica) == ("small", "scripted-1", "w-test")
    assert completed.usage == final.usage and completed.parent_id == "p-r1"
    usage = next(e for e in h.sink.acked("r1") if isinstance(e, UsageRecorded))
    assert usage.finish_reason == "stop" and usage.queue_ms > 0

    # The order: every chunk acked before GenerationCompleted is produced; it and UsageRecorded are
    # committed together before the final chunk is produced; on_finished only after the last ack.
    log = h.sink
    assert max(log.index("ack", c) for c in stream) < log.index("produce", completed)
    assert log.index("produce", usage) < log.index("ack", completed) == log.index("ack", usage) - 1
    assert log.index("ack", usage) < log.index("produce", final)
    assert log.index("ack", final) < h.sink_at_finish[(0, 7)]


async def test_the_engine_gets_the_rendered_prompt_under_the_attempts_rid() -> None:
    h = Harness()
    r = routed("r2", "[[tokens:3]]", attempt=2, max_tokens=100)
    h.scheduler.accept(r, partition=1, offset=0)
    await until(lambda: h.finished == [(1, 0)])
    (sent,) = h.engine.requests
    assert sent.rid == engine_rid("r2", 2) == "r2:2"
    assert sent.text == CHATML.render_prompt(r.request.messages)
    assert (sent.max_new_tokens, sent.stop, sent.temperature) == (100, CHATML.stop, SETTINGS.temperature)
    assert h.completed("r2").attempt == 2


@pytest.mark.parametrize("template", [LLAMA3, DEEPSEEK], ids=lambda t: t.family)
async def test_the_prompt_is_rendered_in_the_pools_template_with_its_stops(template: ChatTemplate) -> None:
    h = Harness(template=template)
    r = routed("r3", "[[tokens:3]]")
    h.scheduler.accept(r, partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    (sent,) = h.engine.requests
    assert sent.text == template.render_prompt(r.request.messages) != CHATML.render_prompt(r.request.messages)
    assert sent.stop[: len(template.stop)] == template.stop


async def test_a_resumed_attempt_continues_after_the_text_already_streamed() -> None:
    h = Harness()
    h.scheduler.accept(routed("r3", "[[tokens:2]]", attempt=1, resume_text="Once "), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    assert h.engine.requests[0].text.endswith("assistant\nOnce ")
    first = h.chunks("r3")[0]
    assert first.offset_chars == len("Once ")
    assert h.completed("r3").content == "Once " + scripted_reply(2)


async def test_held_text_goes_out_by_its_deadline_without_waiting_for_the_next_delta() -> None:
    """A stream that stalls mid-chunk still shows its text: the coalescer's deadline is waited on."""
    h = Harness(replace(SETTINGS, coalesce_ms=1.0, coalesce_tokens=1000))
    h.scheduler.accept(routed("r4", "[[tokens:10]][[hold:5]]"), partition=0, offset=0)
    await until(lambda: "r4:0" in h.engine.holding)
    # Tokens 1..4 arrived right after the first chunk; they must be sent although token 5 is held back.
    await until(lambda: "".join(c.text for c in h.chunks("r4")) == scripted_reply(5))
    h.engine.release()
    await until(lambda: h.finished == [(0, 0)])
    assert "".join(c.text for c in h.chunks("r4")) == scripted_reply(10)


async def test_concurrency_is_bounded_and_queued_requests_start_as_slots_free() -> None:
    h = Harness(replace(SETTINGS, max_concurrency=2, max_queued=1))
    for i, content in enumerate(["[[tokens:4]][[hold:1]]", "[[tokens:4]][[hold:1]]", "[[tokens:4]]"]):
        h.scheduler.accept(routed(f"q{i}", content), partition=0, offset=i)
    await until(lambda: len(h.engine.holding) == 2)
    s = h.scheduler
    assert (s.running, s.queued, s.free_slots) == (2, 1, 0)
    assert [r.rid for r in h.engine.requests] == ["q0:0", "q1:0"]
    assert h.scheduler.heartbeat(partitions=[0], load=None).queued == 1
    h.engine.release()
    await until(lambda: len(h.finished) == 3)
    assert sorted(h.finished) == [(0, 0), (0, 1), (0, 2)]
    assert (s.running, s.queued, s.free_slots) == (0, 0, 3)


async def test_a_cancel_aborts_a_running_generation_which_closes_as_cancelled_with_partial_text() -> None:
    h = Harness()
    h.scheduler.accept(routed("c1", "[[tokens:50]][[hold:6]]"), partition=0, offset=0)
    await until(lambda: "c1:0" in h.engine.holding)
    h.scheduler.cancel("c1", "user")
    await until(lambda: h.finished == [(0, 0)])
    assert h.engine.aborted == ["c1:0"]
    completed = h.completed("c1")
    assert completed.finish_reason == "cancelled" and completed.content == scripted_reply(6)
    assert completed.error_code is None
    final = h.chunks("c1")[-1]
    assert final.finish_reason == "cancelled"
    assert "".join(c.text for c in h.chunks("c1")) == completed.content


async def test_a_cancel_for_a_queued_request_closes_it_without_the_engine() -> None:
    h = Harness(replace(SETTINGS, max_concurrency=1, max_queued=3))
    h.scheduler.accept(routed("busy", "[[tokens:3]][[hold:1]]"), partition=0, offset=0)
    h.scheduler.accept(routed("waiting"), partition=0, offset=1)
    await until(lambda: "busy:0" in h.engine.holding)
    h.scheduler.cancel("waiting", "user")
    await until(lambda: h.finished == [(0, 1)])  # done while the first still runs
    assert [r.rid for r in h.engine.requests] == ["busy:0"]
    completed = h.completed("waiting")
    assert (completed.finish_reason, completed.content) == ("cancelled", "")
    (final,) = h.chunks("waiting")
    assert (final.seq, final.finish_reason) == (0, "cancelled")
    h.engine.release()
    await until(lambda: len(h.finished) == 2)


async def test_a_cancel_that_overtakes_its_request_is_honoured_while_remembered() -> None:
    now = [100.0]
    h = Harness(replace(SETTINGS, cancel_memory_s=10.0), clock=lambda: now[0])
    h.scheduler.cancel("early", "user")
    h.scheduler.accept(routed("early"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    assert h.engine.requests == [] and h.completed("early").finish_reason == "cancelled"

    h.scheduler.cancel("late", "user")
    now[0] += 11.0  # forgotten by the time the request comes
    h.scheduler.accept(routed("late", "[[tokens:2]]"), partition=0, offset=1)
    await until(lambda: len(h.finished) == 2)
    assert h.completed("late").finish_reason == "stop"


async def test_a_cancel_by_moderation_ends_content_filter_with_the_notice_and_not_the_text() -> None:
    h = Harness()
    h.scheduler.accept(routed("cut", "[[tokens:50]][[hold:6]]"), partition=0, offset=0)
    await until(lambda: "cut:0" in h.engine.holding)
    h.scheduler.cancel("cut", "moderation")
    await until(lambda: h.finished == [(0, 0)])
    completed = h.completed("cut")
    assert (completed.finish_reason, completed.content) == ("content_filter", FILTERED_NOTICE)
    assert h.chunks("cut")[-1].finish_reason == "content_filter"

    h.scheduler.cancel("early", "moderation")  # a flagged input can stop a turn before it reaches a worker
    h.scheduler.accept(routed("early"), partition=0, offset=1)
    await until(lambda: len(h.finished) == 2)
    assert h.engine.requests[-1].rid == "cut:0" and h.completed("early").finish_reason == "content_filter"


async def test_an_engine_that_ignores_the_abort_is_cut_off_after_the_grace() -> None:
    class Deaf(ScriptedEngine):
        async def abort(self, rid: str) -> None:
            self.aborted.append(rid)  # and nothing happens

    h = Harness(replace(SETTINGS, abort_grace_s=0.01), engine=Deaf())
    h.scheduler.accept(routed("deaf", "[[tokens:9]][[hold:2]]"), partition=0, offset=0)
    await until(lambda: "deaf:0" in h.engine.holding)
    h.scheduler.cancel("deaf", "user")
    await until(lambda: h.finished == [(0, 0)])
    assert h.completed("deaf").finish_reason == "cancelled"
    assert h.completed("deaf").content == scripted_reply(2)
    await until(lambda: not h.engine.holding)  # the stream was closed, not left hanging


@pytest.mark.parametrize(
    ("directive", "code"),
    [("[[fail:unavailable]]", "engine_unavailable"), ("[[fail:rejected]]", "engine_rejected")],
)
async def test_an_engine_refusal_closes_the_request_as_failed_and_the_worker_goes_on(
    directive: str, code: str
) -> None:
    h = Harness()
    h.scheduler.accept(routed("bad", directive), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    completed = h.completed("bad")
    assert (completed.finish_reason, completed.error_code) == ("failed", code)
    assert completed.error_message and "scripted engine" in completed.error_message
    (final,) = h.chunks("bad")
    assert (final.finish_reason, final.error_code, final.seq) == ("failed", code, 0)
    h.scheduler.accept(routed("next", "[[tokens:3]]"), partition=0, offset=1)
    await until(lambda: len(h.finished) == 2)
    assert h.completed("next").finish_reason == "stop"


async def test_a_failure_mid_stream_keeps_the_partial_text() -> None:
    h = Harness()
    h.scheduler.accept(routed("mid", "[[tokens:10]][[fail:midstream]]"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    completed = h.completed("mid")
    assert (completed.finish_reason, completed.error_code) == ("failed", "engine_failed")
    assert completed.content == scripted_reply(5) == "".join(c.text for c in h.chunks("mid"))


async def test_after_an_unavailable_engine_no_records_are_taken_until_its_health_answers() -> None:
    now = [0.0]
    h = Harness(clock=lambda: now[0])
    h.engine.healthy = False
    assert not await h.scheduler.engine_ready()  # probed before the first record
    h.engine.healthy = True
    assert not await h.scheduler.engine_ready()  # probes are spaced out
    now[0] += PROBE_S
    assert await h.scheduler.engine_ready()
    assert await h.scheduler.engine_ready()  # healthy: no probe needed

    h.engine.healthy = False
    h.scheduler.accept(routed("down"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    assert h.completed("down").error_code == "engine_unavailable"
    now[0] += PROBE_S
    assert not await h.scheduler.engine_ready()
    h.engine.healthy = True
    now[0] += PROBE_S
    assert await h.scheduler.engine_ready()


async def test_abandoning_a_partition_stops_its_jobs_without_events_or_finishing() -> None:
    h = Harness()
    h.scheduler.accept(routed("gone", "[[tokens:9]][[hold:3]]"), partition=0, offset=0)
    h.scheduler.accept(routed("kept", "[[tokens:9]][[hold:3]]"), partition=1, offset=0)
    await until(lambda: h.engine.holding == {"gone:0", "kept:0"})
    assert await h.scheduler.abandon([0]) == 1
    assert "gone:0" in h.engine.aborted and "kept:0" not in h.engine.aborted
    h.engine.release()
    await until(lambda: h.finished == [(1, 0)])
    assert not [e for e in h.sink.acked("gone") if isinstance(e, GenerationCompleted)]
    assert h.scheduler.held == 0


async def test_drain_finishes_running_jobs_and_leaves_queued_ones_for_the_next_owner() -> None:
    h = Harness(replace(SETTINGS, max_concurrency=1, max_queued=2))
    h.scheduler.accept(routed("run", "[[tokens:4]][[hold:2]]"), partition=0, offset=0)
    h.scheduler.accept(routed("wait"), partition=0, offset=1)
    await until(lambda: "run:0" in h.engine.holding)
    drained = asyncio.create_task(h.scheduler.drain(timeout=30))
    await until(lambda: h.scheduler.draining)
    h.engine.release()
    await drained
    assert h.finished == [(0, 0)]
    assert [r.rid for r in h.engine.requests] == ["run:0"]
    h.scheduler.accept(routed("after"), partition=0, offset=2)  # ignored while draining
    assert h.scheduler.held == 0
    assert h.scheduler.heartbeat(partitions=[], load=None).draining


async def test_drain_abandons_what_does_not_finish_in_time() -> None:
    h = Harness()
    h.scheduler.accept(routed("stuck", "[[tokens:9]][[hold:1]]"), partition=3, offset=0)
    await until(lambda: "stuck:0" in h.engine.holding)
    await h.scheduler.drain(timeout=0.01)
    assert h.finished == [] and h.engine.aborted == ["stuck:0"]


async def test_closing_events_are_retried_until_the_broker_acknowledges() -> None:
    h = Harness()
    h.sink.failures[GenerationCompleted] = 1
    h.scheduler.accept(routed("retry", "[[tokens:2]]"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    produced = [e for w, e in h.sink.log if w == "produce" and isinstance(e, GenerationCompleted)]
    assert len(produced) == 2 and h.completed("retry").finish_reason == "stop"


@pytest.mark.parametrize("refusal", [ClosingRefused("MSG_SIZE_TOO_LARGE"), InvalidEvent("a bug"), RuntimeError("a bug")])
async def test_a_closing_that_cannot_be_written_ends_the_turn_worker_error(refusal: Exception) -> None:
    h = Harness()
    h.sink.refuse = lambda e: refusal if isinstance(e, GenerationCompleted) and e.request_id == "big" and e.finish_reason == "stop" else None
    h.scheduler.accept(routed("big", "[[tokens:3]]"), partition=0, offset=0)
    h.scheduler.accept(routed("next", "[[tokens:2]]"), partition=0, offset=1)
    await until(lambda: h.finished == [(0, 0), (0, 1)])
    completed = h.completed("big")
    assert (completed.finish_reason, completed.error_code) == ("failed", "worker_error")
    final = h.chunks("big")[-1]
    assert final.finish_reason == "failed" and final.seq == len(h.chunks("big")) - 1  # the stream ends, in order
    assert h.completed("next").finish_reason == "stop"  # the worker goes on


async def test_a_closing_whose_key_is_away_is_retried_not_failed() -> None:
    h = Harness()
    away = [StoreUnavailable("key store away")]  # sealing the reply needs its user's key
    h.sink.refuse = lambda e: away.pop() if away and isinstance(e, GenerationCompleted) else None
    h.scheduler.accept(routed("sealed", "[[tokens:2]]"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)], timeout=10)
    assert h.completed("sealed").finish_reason == "stop"


async def test_a_closing_refused_twice_lets_the_record_go() -> None:
    h = Harness()
    h.sink.refuse = lambda e: ClosingRefused("MSG_SIZE_TOO_LARGE") if isinstance(e, GenerationCompleted) else None
    h.scheduler.accept(routed("poison", "[[tokens:3]]"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    assert not [e for e in h.sink.acked("poison") if isinstance(e, GenerationCompleted)]


async def test_heartbeat_reports_load_and_identity() -> None:
    h = Harness()
    beat = h.scheduler.heartbeat(
        partitions=[1, 4], load=EngineLoad(running=3, queued=1, max_running=8, kv_usage=0.5, cache_hit_rate=0.25)
    )
    assert (beat.worker_id, beat.pool, beat.model, beat.partitions) == ("w-test", "small", "scripted-1", [1, 4])
    assert (beat.max_running, beat.kv_usage, beat.cache_hit_rate, beat.draining) == (4, 0.5, 0.25, False)
    assert beat.key == b"w-test"


async def test_a_second_record_of_the_same_attempt_is_not_generated_again() -> None:
    h = Harness(clock=lambda: 0.0)
    h.scheduler.accept(routed("r-dup", "[[tokens:40]]"), partition=0, offset=1)
    h.scheduler.accept(routed("r-dup", "[[tokens:40]]"), partition=1, offset=9)  # while the first is held
    await until(lambda: sorted(h.finished) == [(0, 1), (1, 9)])
    h.scheduler.accept(routed("r-dup", "[[tokens:40]]"), partition=0, offset=2)  # after it closed
    await until(lambda: (0, 2) in h.finished)
    assert len(h.engine.requests) == 1
    assert len([e for e in h.sink.acked("r-dup") if isinstance(e, GenerationCompleted)]) == 1
    assert h.scheduler.duplicates_skipped == 2
    h.scheduler.accept(routed("r-dup", "[[tokens:4]]", attempt=1), partition=0, offset=3)  # a new attempt is not one
    await until(lambda: (0, 3) in h.finished)
    assert len(h.engine.requests) == 2


async def test_the_original_record_of_a_resumed_request_is_a_duplicate_too() -> None:
    h = Harness(clock=lambda: 0.0)
    h.scheduler.accept(routed("r-res", "[[tokens:8]]", attempt=1, resume_text="tok0 tok1"), partition=0, offset=5)
    await until(lambda: (0, 5) in h.finished)
    h.scheduler.accept(routed("r-res", "[[tokens:8]]", attempt=0), partition=0, offset=6)  # re-emitted original
    await until(lambda: (0, 6) in h.finished)
    assert len(h.engine.requests) == 1 and h.scheduler.duplicates_skipped == 1


async def test_the_turns_sampling_reaches_the_engine_and_the_pool_default_fills_the_rest() -> None:
    h = Harness()
    asked = routed("s1", "[[tokens:2]]")
    sampling = Sampling(temperature=0.0, seed=11, stop=["END"], frequency_penalty=0.5, json_schema='{"type":"object"}')
    h.scheduler.accept(replace(asked, request=replace(asked.request, sampling=sampling)), partition=0, offset=0)
    h.scheduler.accept(routed("s2", "[[tokens:2]]"), partition=0, offset=1)
    await until(lambda: len(h.finished) == 2)
    first, second = h.engine.requests
    assert (first.temperature, first.seed, first.frequency_penalty, first.json_schema) == (0.0, 11, 0.5, '{"type":"object"}')
    assert first.stop == (*CHATML.stop, "END")
    assert (second.temperature, second.seed, second.stop) == (SETTINGS.temperature, None, CHATML.stop)


async def test_the_sampling_extensions_reach_the_engine_with_min_tokens_held_to_the_cap() -> None:
    h = Harness()
    extensions = Sampling(top_k=40, min_p=0.05, repetition_penalty=1.1, ignore_eos=True, stop_token_ids=[2, 7], min_tokens=8)
    asked = routed("x1", "[[tokens:2]]")
    h.scheduler.accept(replace(asked, request=replace(asked.request, sampling=extensions, max_tokens=20)), partition=0, offset=0)
    greedy = routed("x2", "[[tokens:2]]")
    capped = replace(greedy.request, sampling=Sampling(min_tokens=50), max_tokens=6)
    h.scheduler.accept(replace(greedy, request=capped), partition=0, offset=1)
    await until(lambda: len(h.finished) == 2)
    first, second = h.engine.requests
    assert (first.top_k, first.min_p, first.repetition_penalty, first.ignore_eos) == (40, 0.05, 1.1, True)
    assert (first.stop_token_ids, first.min_new_tokens, first.max_new_tokens) == ((2, 7), 8, 20)
    assert (second.min_new_tokens, second.max_new_tokens) == (6, 6)  # never past the cap the engine gets
    assert (second.top_k, second.min_p, second.repetition_penalty, second.ignore_eos, second.stop_token_ids) == (None, None, None, False, ())


class Speaking(ScriptedEngine):
    """An engine whose model writes ``pieces``, whatever the prompt (a model calling a tool, say)."""

    def __init__(self, pieces: Sequence[str]) -> None:
        super().__init__(model="scripted-1")
        self.pieces = pieces

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        self.requests.append(request)
        for i, text in enumerate(self.pieces):
            yield EngineDelta(text, i + 1, 10, 0, finish_reason="stop" if i == len(self.pieces) - 1 else None)


TOOLS = Tools(functions=[ToolFunction(name="get_weather", parameters='{"type":"object"}')])


@pytest.mark.parametrize(
    ("template", "pieces"),
    [
        (CHATML, ["Let me ", "look.\n<tool", '_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool_call>']),
        (LLAMA3, ["Let me look.\n", "<|python_tag|>", '{"name": "get_weather", "parameters": {"city": "Paris"}}']),
    ],
    ids=lambda v: getattr(v, "family", ""),
)
async def test_a_models_tool_call_is_parsed_out_of_its_stream_and_closes_the_reply(template: ChatTemplate, pieces: list[str]) -> None:
    h = Harness(engine=Speaking(pieces), template=template)
    asked = routed("t1")
    h.scheduler.accept(replace(asked, request=replace(asked.request, tools=TOOLS)), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    (sent,) = h.engine.requests
    assert "get_weather" in sent.text and sent.skip_special_tokens is (template is CHATML)  # llama3's tag is special
    *stream, final = h.chunks("t1")
    assert "".join(c.text for c in stream) == "Let me look.\n"  # the markup never goes out as text
    call = ToolCall(id=call_id("t1", 0), name="get_weather", arguments='{"city":"Paris"}')
    assert final.tool_calls == [call] and final.finish_reason == "stop"
    completed = h.completed("t1")
    assert (completed.content, completed.tool_calls) == ("Let me look.\n", [call])


@pytest.mark.parametrize("template", [CHATML, LLAMA3], ids=lambda t: t.family)
async def test_a_forced_tool_choice_sends_the_calls_schema_and_reads_the_constrained_array(template: ChatTemplate) -> None:
    """Whatever the family, the engine is sent SGLang's array-of-calls schema for a named function (overriding a
    response_format's) and the reply it constrains is read as the call."""
    weather = Tools(
        functions=[ToolFunction(name="get_weather", parameters='{"type":"object","properties":{"city":{"type":"string"}}}')],
        choice="function", function="get_weather",
    )  # fmt: skip
    array = ['[{"name": "get_weather", ', '"parameters": {"city": "Paris"}}]']
    h = Harness(engine=Speaking(array), template=template)
    asked = routed("f1")
    request = replace(asked.request, tools=weather, sampling=Sampling(json_schema='{"type":"string"}'))
    h.scheduler.accept(replace(asked, request=request), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    (sent,) = h.engine.requests
    assert sent.json_schema == forced_schema(weather) and json.loads(sent.json_schema)["items"]["properties"]["name"]["enum"] == ["get_weather"]
    assert sent.text == template.render_prompt(request.messages, tools=weather)  # nothing forced in the prompt
    *stream, final = h.chunks("f1")
    assert "".join(c.text for c in stream) == ""
    assert final.tool_calls == [ToolCall(id=call_id("f1", 0), name="get_weather", arguments='{"city":"Paris"}')]


async def test_without_tools_the_text_is_the_models_as_written() -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'
    h = Harness(engine=Speaking([text]))
    h.scheduler.accept(routed("t2"), partition=0, offset=0)
    await until(lambda: h.finished == [(0, 0)])
    assert h.completed("t2").content == text and h.completed("t2").tool_calls == []
