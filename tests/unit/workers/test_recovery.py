"""Recovering a redelivered request, without Kafka: the fold of earlier attempts into a verdict
(workers/recovery.py), the scheduler acting on it, the ``restarted`` SSE event (gateway/replies.py)
and the Python client's reading of it (tools/client.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from gateway.replies import live
from gateway.tokens import Chunk, Stream
from schemas.endings import HISTORY_UNAVAILABLE
from schemas.events import (
    GenerationCompleted,
    InferenceRequested,
    InferenceRouted,
    PromptMessage,
    TokenChunk,
    Usage,
    UsageRecorded,
)
from tests.unit.workers.test_scheduler import SETTINGS, MemorySink
from tools.client import SseEvent, reply_text
from workers.chat_template import CHATML
from workers.recovery import Finished, History, Resume, known_text, unreadable, verdict
from workers.scheduler import Scheduler
from workers.scripted import ScriptedEngine, scripted_reply

CID = str(uuid.uuid4())


def routed(content: str = "[[tokens:10]] hi", attempt: int = 0) -> InferenceRouted:
    request = InferenceRequested(
        conversation_id=CID,
        user_id="u",
        request_id=str(uuid.uuid4()),
        parent_id=str(uuid.uuid4()),
        attempt=attempt,
        messages=[PromptMessage(role="user", content=content)],
        tier="plus",
    )
    return InferenceRouted(conversation_id=CID, user_id="u", request=request, pool="small", model="m", partition=0)


def chunks(r: InferenceRouted, texts: list[str], *, attempt: int = 0, start: int = 0, first_seq: int = 0) -> list[TokenChunk]:
    out, offset = [], start
    for i, text in enumerate(texts):
        out.append(
            TokenChunk(
                conversation_id=CID,
                user_id="u",
                request_id=r.request.request_id,
                attempt=attempt,
                seq=first_seq + i,
                text=text,
                tokens=1,
                offset_chars=offset,
            )
        )
        offset += len(text)
    return out


def final(r: InferenceRouted, *, attempt: int = 0, seq: int, offset: int) -> TokenChunk:
    return TokenChunk(
        conversation_id=CID,
        user_id="u",
        request_id=r.request.request_id,
        attempt=attempt,
        seq=seq,
        offset_chars=offset,
        finish_reason="stop",
        usage=Usage(prompt_tokens=5, completion_tokens=3),
    )


def completion(r: InferenceRouted, content: str, attempt: int = 0) -> GenerationCompleted:
    return GenerationCompleted(
        conversation_id=CID,
        user_id="u",
        request_id=r.request.request_id,
        parent_id=r.request.parent_id,
        attempt=attempt,
        finish_reason="stop",
        content=content,
        usage=Usage(prompt_tokens=5, completion_tokens=3),
        pool="small",
        model="m",
        replica="dead",
    )


# ------------------------------------------------------------------ the fold


def test_nothing_on_the_log_runs_as_the_next_attempt_from_nothing() -> None:
    """The previous owner's chunks may still be on their way: a new attempt number supersedes them."""
    r = routed()
    other = routed()
    assert verdict(r, History(chunks=tuple(chunks(other, ["a"])))) == Resume(attempt=1, text="", tokens=0)
    again = replace(r, request=replace(r.request, attempt=2))
    assert verdict(again, History()) == Resume(attempt=3, text="", tokens=0)


def test_a_partial_reply_resumes_one_attempt_up_from_its_text() -> None:
    r = routed()
    found = verdict(r, History(chunks=tuple(chunks(r, ["Hel", "lo ", "wor"]))))
    assert found == Resume(attempt=1, text="Hello wor", tokens=3)


def test_a_superseded_attempt_keeps_only_the_prefix_the_next_one_continued_from() -> None:
    r = routed()
    first = chunks(r, ["ab", "cd", "ef"])  # attempt 0 went on to "abcdef" after attempt 1 had started at 4
    second = chunks(r, ["XY", "Z"], attempt=1, start=4)
    found = verdict(r, History(chunks=tuple(second + first)))  # order on the log does not matter
    assert found == Resume(attempt=2, text="abcdXYZ", tokens=4)


def test_a_gap_stops_the_text_at_the_last_contiguous_chunk() -> None:
    r = routed()
    a, _, c = chunks(r, ["ab", "cd", "ef"])
    assert known_text([a, c]) == ("ab", 1)


def test_an_attempt_whose_first_chunk_is_missing_makes_the_text_unknown() -> None:
    r = routed()
    later = chunks(r, ["x"], attempt=1, start=2, first_seq=1)
    assert verdict(r, History(chunks=tuple(chunks(r, ["ab"]) + later))) == Resume(attempt=2, text="", tokens=0)


def test_an_attempt_starting_beyond_the_known_text_leaves_that_text() -> None:
    r = routed()
    beyond = chunks(r, ["zz"], attempt=1, start=9)
    assert known_text(chunks(r, ["ab"]) + beyond) == ("ab", 1)


def test_a_routed_attempt_above_what_the_log_shows_still_goes_up() -> None:
    r = routed(attempt=3)
    assert verdict(r, History(chunks=tuple(chunks(r, ["a"])))) == Resume(attempt=4, text="a", tokens=1)


def test_a_finished_request_with_every_closing_event_resends_nothing() -> None:
    r = routed()
    text = chunks(r, ["ab", "cd"])
    usage = UsageRecorded(conversation_id=CID, user_id="u", request_id=r.request.request_id, attempt=0)
    history = History(chunks=(*text, final(r, seq=2, offset=4)), completions=(completion(r, "abcd"),), usage=(usage,))
    assert verdict(r, history) == Finished(())


def test_a_completion_without_its_final_chunk_resends_the_chunk_and_the_usage() -> None:
    r = routed()
    history = History(chunks=tuple(chunks(r, ["ab", "cd"])), completions=(completion(r, "abcd"),))
    found = verdict(r, history)
    assert isinstance(found, Finished)
    chunk, usage = found.missing
    assert isinstance(chunk, TokenChunk) and isinstance(usage, UsageRecorded)
    assert (chunk.attempt, chunk.seq, chunk.offset_chars, chunk.text) == (0, 2, 4, "")
    assert chunk.finish_reason == "stop" and chunk.usage == Usage(prompt_tokens=5, completion_tokens=3)
    assert (usage.request_id, usage.attempt, usage.tier, usage.finish_reason) == (r.request.request_id, 0, "plus", "stop")


def test_a_final_chunk_without_its_usage_resends_only_the_usage() -> None:
    r = routed()
    history = History(chunks=(final(r, seq=0, offset=4),), completions=(completion(r, "abcd"),))
    found = verdict(r, history)
    assert isinstance(found, Finished) and [type(e) for e in found.missing] == [UsageRecorded]


def test_a_final_chunk_alone_means_finished() -> None:
    r = routed()
    assert verdict(r, History(chunks=(*chunks(r, ["ab"]), final(r, seq=1, offset=2)))) == Finished(())


def test_the_completion_of_the_latest_attempt_decides() -> None:
    r = routed()
    history = History(
        chunks=tuple(chunks(r, ["ab"]) + chunks(r, ["cd"], attempt=1, start=2)),
        completions=(completion(r, "abcd", attempt=1),),
    )
    found = verdict(r, history)
    assert isinstance(found, Finished)
    chunk = found.missing[0]
    assert isinstance(chunk, TokenChunk) and (chunk.attempt, chunk.seq, chunk.offset_chars) == (1, 1, 4)


def test_a_history_read_only_in_part_has_no_verdict() -> None:
    """Review C1: a lookup stopped by a bound saw no completion, which does not mean there was none.
    Resuming then would generate a finished reply twice (a second completion, a second usage)."""
    r = routed()
    for history in (History(complete=False), History(chunks=tuple(chunks(r, ["ab", "cd"])), complete=False)):
        with pytest.raises(ValueError, match="read only in part"):  # IncompleteHistory
            verdict(r, history)


def test_an_unreadable_history_ends_the_turn_under_the_next_attempt_without_usage() -> None:
    r = routed(attempt=1)
    found = unreadable(r, History(chunks=tuple(chunks(r, ["ab"], attempt=2)), complete=False))
    completed, last = found.missing
    assert isinstance(completed, GenerationCompleted) and isinstance(last, TokenChunk)
    assert (completed.finish_reason, completed.error_code, completed.attempt) == ("failed", HISTORY_UNAVAILABLE, 3)
    assert (last.finish_reason, last.error_code, last.attempt, last.seq) == ("failed", HISTORY_UNAVAILABLE, 3, 0)
    assert completed.usage == Usage() and completed.request_id == r.request.request_id


# ------------------------------------------------------------------ the scheduler acting on it


class Harness:
    def __init__(self, found: Any) -> None:
        self.engine = ScriptedEngine()
        self.sink = MemorySink()
        self.finished: list[tuple[int, int]] = []
        self.asked: list[InferenceRouted] = []

        async def recover(r: InferenceRouted) -> Any:
            self.asked.append(r)
            if isinstance(found, Exception):
                raise found
            return found

        self.scheduler = Scheduler(
            SETTINGS, self.engine, self.sink, lambda p, o: self.finished.append((p, o)), model="m", recover=recover
        )

    def produced(self, kind: type) -> list[Any]:
        return [e for what, e in self.sink.log if what == "ack" and isinstance(e, kind)]

    async def until_finished(self, n: int = 1) -> None:
        for _ in range(500):
            if len(self.finished) >= n:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the job did not finish")


async def test_a_resumed_job_continues_after_the_text_with_the_next_attempt() -> None:
    r = routed("[[tokens:10]] go")
    h = Harness(Resume(attempt=1, text=scripted_reply(4), tokens=4))
    h.scheduler.accept(r, 0, 7, inherited=True)
    await h.until_finished()

    (request,) = h.engine.requests
    assert request.rid == f"{r.request.request_id}:1"
    assert request.text == CHATML.render_prompt(r.request.messages, scripted_reply(4))
    (completed,) = h.produced(GenerationCompleted)
    assert (completed.attempt, completed.content) == (1, scripted_reply(10))  # the whole reply, once
    texts = [c for c in h.produced(TokenChunk) if c.finish_reason is None]
    assert texts[0].seq == 0 and texts[0].offset_chars == len(scripted_reply(4)) and texts[0].attempt == 1
    assert "".join(c.text for c in texts) == scripted_reply(10)[len(scripted_reply(4)) :]
    assert completed.usage.completion_tokens == 10  # 4 earlier + 6 now
    assert h.finished == [(0, 7)]


async def test_a_finished_job_is_not_generated_and_its_missing_events_go_out() -> None:
    r = routed()
    chunk = final(r, seq=3, offset=4)
    h = Harness(Finished((chunk,)))
    h.scheduler.accept(r, 0, 3, inherited=True)
    await h.until_finished()
    assert h.engine.requests == []
    assert h.produced(TokenChunk) == [chunk] and h.produced(GenerationCompleted) == []
    assert h.finished == [(0, 3)]


async def test_a_lookup_that_fails_ends_the_turn_and_never_generates() -> None:
    """Outages are waited out inside the lookup; what escapes it is a bug, and resuming from nothing
    then could answer a finished turn twice."""
    r = routed()
    h = Harness(RuntimeError("a bug in the lookup"))
    h.scheduler.accept(r, 0, 5, inherited=True)
    await h.until_finished()
    assert h.engine.requests == []
    (completed,) = h.produced(GenerationCompleted)
    (last,) = h.produced(TokenChunk)
    assert (completed.error_code, completed.attempt) == (HISTORY_UNAVAILABLE, 1)
    assert (last.finish_reason, last.error_code) == ("failed", HISTORY_UNAVAILABLE)
    assert h.produced(UsageRecorded) == [] and h.finished == [(0, 5)]


async def test_an_ending_that_cannot_be_resent_is_ended_worker_error_under_its_attempt() -> None:
    r = routed()
    h = Harness(RuntimeError("a bug in the lookup"))
    h.sink.refuse = lambda e: RuntimeError("a bug") if getattr(e, "error_code", None) == HISTORY_UNAVAILABLE else None
    h.scheduler.accept(r, 0, 5, inherited=True)
    await h.until_finished()
    (completed,) = h.produced(GenerationCompleted)
    assert (completed.error_code, completed.attempt) == ("worker_error", 1)
    assert [c.finish_reason for c in h.produced(TokenChunk)] == ["failed"]


async def test_a_missing_final_chunk_that_cannot_be_resent_never_adds_a_second_ending() -> None:
    r = routed()
    chunk = final(r, seq=3, offset=4)
    h = Harness(Finished((chunk,)))
    h.sink.refuse = lambda e: None
    h.sink.failures.clear()
    sent = h.sink.send

    async def broken(event: Any) -> Any:
        if event is chunk:
            raise RuntimeError("a bug")
        return await sent(event)

    h.sink.send = broken  # type: ignore[method-assign]
    h.scheduler.accept(r, 0, 3, inherited=True)
    await h.until_finished()
    assert h.produced(GenerationCompleted) == [] and h.finished == [(0, 3)]


async def test_fresh_traffic_is_not_looked_up() -> None:
    h = Harness(Finished())  # were it looked up, it would not run
    h.scheduler.accept(routed("[[tokens:2]]"), 0, 1)
    await h.until_finished()
    assert h.asked == [] and len(h.engine.requests) == 1


async def test_a_job_looked_up_while_draining_is_handed_back() -> None:
    h = Harness(Resume(attempt=1, text="", tokens=0))
    h.scheduler.accept(routed(), 0, 1, inherited=True)
    await h.scheduler.drain(5.0)
    assert h.engine.requests == [] and h.finished == [] and h.scheduler.held == 0


# ------------------------------------------------------------------ readers


class _Tokens:
    def close_stream(self, stream: Stream) -> None:
        stream.closed = True


async def test_live_says_restarted_when_a_higher_attempt_begins() -> None:
    r = routed()
    stream = Stream(r.request.request_id, 2, 0)
    log = chunks(r, ["ab", "cd"]) + chunks(r, ["d", "ef"], attempt=1, start=3)
    log.append(final(r, attempt=1, seq=2, offset=6))
    log.insert(3, chunks(r, ["late"], first_seq=2, start=4)[0])  # attempt 0's straggler, dropped
    for offset, c in enumerate(log, start=10):
        stream.queue.put_nowait(Chunk(c, 2, offset))
    events = [e async for e in live(_Tokens(), stream, [])]  # type: ignore[arg-type]
    names = [e["event"] for e in events]
    # Chunks queued together go out as one delta per run of one attempt (gateway/replies.py).
    assert names == ["delta", "restarted", "delta", "done"]
    assert [json.loads(events[i]["data"])["text"] for i in (0, 2)] == ["abcd", "def"]
    restarted = events[1]
    assert json.loads(restarted["data"]) == {"message_id": r.request.request_id, "attempt": 1, "offset_chars": 3}
    assert restarted["id"] == "2:11"  # just before the chunk it announces: a resume reads both again
    sse = [SseEvent(e["event"], json.loads(e["data"]), e.get("id")) for e in events]
    assert reply_text(sse) == "abcdef"
    assert stream.closed


def test_the_client_cuts_back_to_offset_chars_then_appends() -> None:
    events = [
        SseEvent("delta", {"text": "héllo wo"}),
        SseEvent("restarted", {"message_id": "m", "attempt": 1, "offset_chars": 6}),
        SseEvent("delta", {"text": "world"}),
        SseEvent("done", {"finish_reason": "stop"}),
    ]
    assert reply_text(events) == "héllo world"
