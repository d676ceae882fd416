"""Carries out one worker's jobs: the engine, the sink and the tasks. The decisions are workers/jobs.py's.

The Kafka shell (workers/worker.py) feeds it routed requests with their
partition and offset and cancels from chat.control; it calls back
``on_finished(partition, offset)`` once a request's closing events are all
acknowledged, which is when the shell may move the commit watermark.

``JobBook`` (the pure core) answers each record, cancel and ending with
actions; this runner executes them: a task per job that generates through the
engine and settles its closing events (one fenced transaction, then the final
chunk), an engine abort on cancel, and a lookup (``recover``,
workers/recovery.py) for an *inherited* record — one already in its partition
when this worker was assigned it, which a previous owner may have started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from parley.errors import Fenced, Unavailable
from parley.logs import trace_context
from parley.retry import retrying
from schemas.endings import ENGINE_UNAVAILABLE, WORKER_ERROR
from schemas.events import Event, GenerationCompleted, InferenceRouted, TokenChunk, Tools, WorkerHeartbeat
from workers import priority
from workers.chat_template import CHATML, ChatTemplate, offered
from workers.tool_calls import JSON_CALLS, CallStream, forced_schema, structural_tag
from workers.coalesce import Coalescer, Piece
from workers.engine_api import EngineClient, EngineLoad, GenerateRequest
from workers.engine_health import EngineHealth
from workers.generation import REPLY_MAX_BYTES, Generation
from workers.jobs import Abort, Action, Done, Job, JobBook, LookUp, Resend, Run
from workers.outcome import Outcome, terminal_events
from workers.recovery import History, Verdict, unreadable
from workers.settings import WorkerSettings
from workers.telemetry import record_load, record_outcome

log = logging.getLogger(__name__)

#: How long abandoning waits for cancelled jobs to stop.
ABANDON_TIMEOUT_S = 10.0


class EventSink(Protocol):
    def send_nowait(self, event: Event) -> asyncio.Future[Any]:
        """Queue ``event`` now (so queue order is produce order); the future resolves on its ack."""
        ...

    async def send(self, event: Event) -> Any:
        """Produce ``event`` and wait for its ack; raises ``parley.errors.BrokerUnavailable`` when none comes."""
        ...

    async def commit(self, events: Sequence[Event]) -> None:
        """Write ``events`` all or none, only while this worker still owns their request's partition;
        returns once they are committed. Raises ``parley.errors.Fenced`` if this process was
        replaced by another with its id."""
        ...


@dataclass(eq=False)
class Live:
    """What runs for one job: its task, and once the engine was asked, the generation."""

    task: asyncio.Task[None]
    generation: Generation | None = None
    cut_timer: asyncio.TimerHandle | None = None


class Scheduler:
    def __init__(
        self,
        settings: WorkerSettings,
        engine: EngineClient,
        sink: EventSink,
        on_finished: Callable[[int, int], None],
        *,
        model: str = "",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        recover: Callable[[InferenceRouted], Awaitable[Verdict]] | None = None,
        template: ChatTemplate = CHATML,
    ) -> None:
        self._settings = settings
        #: The pool's model's chat template (PARLEY_POOL_TEMPLATES): prompts are rendered in it, its stops sent.
        self._template = template
        self._engine = engine
        self._sink = sink
        self._on_finished = on_finished
        self._clock = clock
        self._wall = wall
        self._recover = recover
        #: Model the engine serves (from model_info); the shell refreshes it.
        self.model = model
        self._book = JobBook(
            capacity=settings.capacity, max_concurrency=settings.max_concurrency, cancel_memory_s=settings.cancel_memory_s
        )
        self._health = EngineHealth(engine, settings.engine_url, clock)
        self._live: dict[Job, Live] = {}
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ state

    @property
    def running(self) -> int:
        return self._book.running

    @property
    def queued(self) -> int:
        return self._book.queued

    @property
    def held(self) -> int:
        return self._book.held

    @property
    def free_slots(self) -> int:
        return self._book.free_slots

    @property
    def draining(self) -> bool:
        return self._book.draining

    @property
    def finished_count(self) -> int:
        return self._book.finished_count

    @property
    def duplicates_skipped(self) -> int:
        return self._book.duplicates_skipped

    # ------------------------------------------------------------ intake

    def accept(self, routed: InferenceRouted, partition: int, offset: int, *, inherited: bool = False) -> None:
        """Take a record; ``inherited``: a previous owner of the partition may have started it."""
        look_up = inherited and self._recover is not None
        self._do(self._book.accept(routed, partition, offset, look_up=look_up, now=self._clock()))

    def cancel(self, request_id: str, reason: str) -> None:
        """A GenerationCancelRequested: remembered for late requests, applied to held ones."""
        self._do(self._book.cancel(request_id, reason, self._clock()))

    async def engine_ready(self) -> bool:
        return await self._health.ready()

    # ------------------------------------------------------------ hand-back

    async def abandon(self, partitions: Collection[int]) -> int:
        """Stop every job of ``partitions`` without closing events or on_finished; returns how many."""
        jobs = self._book.abandon(partitions)
        live = [self._live[j] for j in jobs if j in self._live]
        asked = [(j, self._live[j].generation) for j in jobs if j in self._live and self._live[j].generation]
        for entry in live:
            entry.task.cancel()
        if live:
            _, stuck = await asyncio.wait([entry.task for entry in live], timeout=ABANDON_TIMEOUT_S)
            if stuck:  # a bug, but the caller (a rebalance) must not wait forever
                log.error("abandoned jobs did not stop", extra={"count": len(stuck)})
        # Free the engine's slots; the new owner submits under the same rid to its own engine.
        await asyncio.gather(*(self._abort(job, generation) for job, generation in asked))
        if jobs:
            log.info("abandoned requests", extra={"partitions": sorted(partitions), "count": len(jobs)})
        return len(jobs)

    async def drain(self, timeout: float) -> None:
        """Take nothing more; let running jobs finish within ``timeout``, then abandon the rest."""
        self._book.drain()
        if self._live:
            await asyncio.wait([entry.task for entry in self._live.values()], timeout=timeout)
        left = self._book.partitions()
        if left:
            log.warning("drain deadline passed (PARLEY_WORKER_DRAIN_TIMEOUT_S)", extra={"abandoned": self._book.held})
            await self.abandon(left)
        await asyncio.gather(*self._background, return_exceptions=True)

    def heartbeat(
        self, *, partitions: list[int], load: EngineLoad | None, read_to: dict[int, int] | None = None
    ) -> WorkerHeartbeat:
        """``read_to``: owned partition → the next offset the intake will take (missing: none taken yet)."""
        settings = self._settings
        record_load(pool=settings.pool, worker=settings.worker_id, queued=self.queued, running=self.running)
        return WorkerHeartbeat(
            worker_id=settings.worker_id,
            pool=settings.pool,
            model=self.model or settings.model_name,
            partitions=partitions,
            read_to=[(read_to or {}).get(p, -1) for p in partitions],
            running=self.running,
            queued=self.queued,
            max_running=settings.max_concurrency,
            kv_usage=load.kv_usage if load else 0.0,
            cache_hit_rate=load.cache_hit_rate if load else 0.0,
            draining=self.draining,
        )

    # ------------------------------------------------------------ carrying out the book's actions

    def _do(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Done(partition, offset):
                    self._on_finished(partition, offset)
                case LookUp(job):
                    self._start(job, self._recovered(job), f"recovery {job.rid}")
                case Run(job):
                    self._start(job, self._run(job), f"generation {job.rid}")
                case Resend(job, events):
                    self._start(job, self._resend(job, events), f"resend {job.rid}")
                case Abort(job):
                    live = self._live.get(job)
                    if live is not None and live.generation is not None:  # else its task sees the cancel first
                        log.info("aborting a running generation", extra=job.ids | {"reason": job.cancel_reason})
                        live.cut_timer = asyncio.get_running_loop().call_later(
                            self._settings.abort_grace_s, live.generation.stop
                        )
                        self._spawn(self._abort(job, live.generation, stop_on_error=True))

    def _start(self, job: Job, work: Awaitable[None], name: str) -> None:
        task = asyncio.create_task(self._tracked(job, work), name=name, context=trace_context(job.routed.trace_id))
        self._live[job] = Live(task)

    async def _tracked(self, job: Job, work: Awaitable[None]) -> None:
        try:
            await work
        finally:
            live = self._live.get(job)
            if live is not None and live.task is asyncio.current_task():
                del self._live[job]
                if live.cut_timer is not None:
                    live.cut_timer.cancel()

    # ------------------------------------------------------------ a job's life

    async def _recovered(self, job: Job) -> None:
        """Look up what earlier attempts did; the book then closes, resumes or queues ``job``.

        ``recover`` waits out outages itself (workers/history_reader.py); what escapes it is a bug, and
        the turn is ended ``history_unavailable``: resuming without the history could answer it twice."""
        assert self._recover is not None
        try:
            found = await self._recover(job.routed)
        except asyncio.CancelledError:
            raise  # abandoned
        except Exception:
            log.exception("redelivered request could not be looked up; ending its turn", extra=job.ids)
            found = unreadable(job.routed, History(complete=False))
        self._do(self._book.recovered(job, found, self._clock()))

    async def _resend(self, job: Job, events: Sequence[Event]) -> None:
        """A redelivered request that had finished: produce the closing events its owner did not get out."""
        committed: list[bool] = []
        try:
            await self._settle(events, job, committed)
        except Fenced:
            self._book.dropped(job)
            return
        except Exception:
            log.exception("could not resend the closing events of a finished request", extra=job.ids)
            final = next((e for e in events if isinstance(e, TokenChunk)), None)
            seq, chars = (final.seq, final.offset_chars) if final is not None else (0, len(job.routed.request.resume_text))
            # Only while no ending of the attempt is on the log: one already there must not get a second.
            ending = next((e for e in events if isinstance(e, GenerationCompleted)), None)
            if ending is not None and not committed and not await self._end_failed(
                job, Outcome(finish_reason="failed"), seq, chars, 0.0, attempt=ending.attempt
            ):
                self._book.dropped(job)
                return
        log.info("redelivered request closed without generating", extra=job.ids | {"resent": len(events)})
        self._do(self._book.ended(job, finished=True))

    async def _run(self, job: Job) -> None:
        finished = False
        req = job.routed.request
        coalescer = Coalescer(self._settings.coalesce_ms / 1000, self._settings.coalesce_tokens, start_chars=len(req.resume_text))
        outcome = Outcome(finish_reason="failed")
        queue_ms = 0.0
        committed: list[bool] = []
        try:
            # A cancel may land between launch and here: then the engine is never asked.
            if job.cancel_reason is None:
                outcome, queue_ms = await self._generate(job, coalescer)
            else:
                outcome = Outcome(finish_reason="cancelled").as_cancelled(job.cancel_reason)
                queue_ms = self._queue_ms(job)
            new_tokens = outcome.usage.completion_tokens  # before resumed(): this attempt's own tokens
            outcome = outcome.resumed(job.resume_tokens)
            model = self._model(job)
            record_outcome(outcome, pool=self._settings.pool, model=model, new_tokens=new_tokens)
            await self._settle(self._closing(job, outcome, coalescer.next_seq, coalescer.chars, queue_ms), job, committed)
            finished = True
            log.info(
                "generation ended",
                extra=job.ids
                | {
                    "finish_reason": outcome.finish_reason,
                    "error_code": outcome.error_code,
                    "completion_tokens": outcome.usage.completion_tokens,
                    "chunks": coalescer.next_seq + 1,
                },
            )
        except asyncio.CancelledError:
            raise  # abandoned: the partition's next owner redoes it
        except Fenced:
            log.error("closing events not committed: this worker was replaced; leaving the request", extra=job.ids)
            self._book.dropped(job)
        except Exception:
            # Not an outage (those _settle retries in place): a closing the log refuses (ClosingRefused), or a
            # bug. A redelivery would fail the same way, so the turn is ended worker_error instead, and its
            # record let go rather than holding back every later commit.
            if committed:  # the reply is on the log; only its final chunk is missing: never end it twice
                log.exception("could not produce the final chunk of a committed reply; its record is let go", extra=job.ids)
                finished = True
            else:
                log.exception("could not close a generation; ending it failed", extra=job.ids)
                finished = await self._end_failed(job, outcome, coalescer.next_seq, coalescer.chars, queue_ms)
                if not finished:
                    self._book.dropped(job)
        finally:
            self._do(self._book.ended(job, finished=finished))

    def _closing(
        self, job: Job, outcome: Outcome, seq: int, chars: int, queue_ms: float, attempt: int | None = None
    ) -> tuple[Event, ...]:
        routed = job.routed
        if attempt is not None:
            routed = replace(routed, request=replace(routed.request, attempt=attempt))
        completed, final, usage = terminal_events(
            routed,
            outcome,
            seq=seq,
            offset_chars=chars,
            replica=self._settings.worker_id,
            model=self._model(job),
            queue_ms=queue_ms,
        )
        return completed, usage, final

    async def _end_failed(
        self, job: Job, outcome: Outcome, seq: int, chars: int, queue_ms: float, attempt: int | None = None
    ) -> bool:
        """One more try, after a closing could not be written: a ``worker_error`` ending without the reply's
        new text (it may be what was refused), so the turn ends and its stream with it. False if fenced."""
        message = "the worker could not record the reply's ending"
        failed = replace(outcome, finish_reason="failed", text="", error_code=WORKER_ERROR, error_message=message)
        try:
            await self._settle(self._closing(job, failed, seq, chars, queue_ms, attempt), job)
        except Fenced:
            return False
        except Exception:
            log.exception("could not end the turn failed either; its record is let go", extra=job.ids)
        return True

    async def _generate(self, job: Job, coalescer: Coalescer) -> tuple[Outcome, float]:
        """The engine's reply, streamed through ``coalescer`` as chunks; with the time it queued (ms)."""
        req = job.routed.request
        asked = req.sampling
        tools = offered(req.tools)
        max_new_tokens = max(1, req.max_tokens - job.resume_tokens)  # the cap is on the whole reply
        forced = _forced(tools)  # a required or named tool choice: the reply is constrained to calls
        request = GenerateRequest(
            rid=job.rid,
            text=self._template.render_prompt(req.messages, req.resume_text, tools),
            max_new_tokens=max_new_tokens,
            temperature=self._settings.temperature if asked.temperature is None else asked.temperature,
            top_p=1.0 if asked.top_p is None else asked.top_p,
            stop=(*self._template.stop, *asked.stop),
            seed=asked.seed,
            presence_penalty=asked.presence_penalty or 0.0,
            frequency_penalty=asked.frequency_penalty or 0.0,
            json_schema=forced or asked.json_schema,  # the calls' schema wins, as in SGLang's OpenAI server
            # Strict functions the model may call: each call it opens is held to its schema (not with a json_schema).
            structural_tag=None if forced or asked.json_schema or tools is None else structural_tag(tools, self._template.tool_format),
            top_k=asked.top_k,
            min_p=asked.min_p,
            repetition_penalty=asked.repetition_penalty,
            ignore_eos=asked.ignore_eos,
            stop_token_ids=tuple(asked.stop_token_ids),
            # The floor is on the whole reply, as the cap is; never past what is left of the cap.
            min_new_tokens=min(max(0, (asked.min_tokens or 0) - job.resume_tokens), max_new_tokens),
            priority=priority.of_turn(req),
            skip_special_tokens=tools is None or not self._template.special_tool_markers,
        )
        acks: list[asyncio.Future[object]] = []

        def emit(piece: Piece) -> None:
            acks.append(self._sink.send_nowait(self._chunk(job, piece)))

        queue_ms = self._queue_ms(job)
        calls = None
        if tools is not None:  # the model's calls are parsed out of its text: its family's format, or forced JSON
            names = [f.name for f in tools.functions]
            fmt = JSON_CALLS if forced else self._template.tool_format
            calls = CallStream(fmt, names, parallel=tools.parallel)
        room = REPLY_MAX_BYTES - len(req.resume_text.encode())  # the cap is on the whole reply, as for tokens
        generation = Generation(self._engine, request, coalescer, emit, self._clock, max_text_bytes=room, calls=calls)
        self._live[job].generation = generation
        outcome = await generation.run()
        if job.cancel_reason is not None:
            outcome = outcome.as_cancelled(job.cancel_reason)
        if outcome.error_code == ENGINE_UNAVAILABLE:
            self._health.suspect()  # take no more records until its health answers again
        # Every chunk is acknowledged before GenerationCompleted: the stream is whole when the reply lands.
        lost = [r for r in await asyncio.gather(*acks, return_exceptions=True) if isinstance(r, BaseException)]
        if lost:
            log.warning("token chunks were not acknowledged", extra=job.ids | {"lost": len(lost)})
        return outcome, queue_ms

    def _chunk(self, job: Job, piece: Piece) -> TokenChunk:
        routed = job.routed
        return TokenChunk(
            conversation_id=routed.conversation_id,
            user_id=routed.user_id,
            trace_id=routed.trace_id,
            request_id=job.request_id,
            attempt=routed.request.attempt,
            seq=piece.seq,
            text=piece.text,
            tokens=piece.tokens,
            offset_chars=piece.offset_chars,
            replica=self._settings.worker_id,
            model=self._model(job) if piece.seq == 0 else "",  # a reader learns the model with the first text
        )

    def _model(self, job: Job) -> str:
        """What the engine serves (its model_info), else the configured name, else the pool's."""
        return self.model or self._settings.model_name or job.routed.model

    def _queue_ms(self, job: Job) -> float:
        """From the router's InferenceRouted to now (engine submission)."""
        return max(0.0, self._wall() * 1000 - job.routed.occurred_at / 1000)

    async def _settle(self, events: Sequence[Event], job: Job, committed: list[bool] | None = None) -> None:
        """Close a request: the events that settle it in one fenced transaction (all or none, and
        only while this worker owns its partition), then its final chunk, so a reader who sees the
        stream end finds the reply and its usage on the log (docs/design.md). ``committed`` is told
        when the transaction is in (its ending must then never be written again)."""
        chunks = [e for e in events if isinstance(e, TokenChunk)]
        settling = [e for e in events if not isinstance(e, TokenChunk)]
        if settling:
            await self._retrying("the settling transaction", lambda: self._sink.commit(settling), job)
            if committed is not None:
                committed.append(True)
        for chunk in chunks:
            await self._retrying("producing the final chunk", lambda: self._sink.send(chunk), job)

    @staticmethod
    async def _retrying(what: str, attempt: Callable[[], Awaitable[object]], job: Job) -> None:
        """Retried while the broker (or, for sealing, the key store) is away: the closing events must not
        be skipped."""
        await retrying(what, attempt, 10.0, on=Unavailable, first_pause_s=0.5, ids=job.ids)

    async def _abort(self, job: Job, generation: Generation, stop_on_error: bool = False) -> None:
        try:
            async with asyncio.timeout(5.0):
                await self._engine.abort(job.rid)
        except Exception as exc:
            log.warning("engine abort failed", extra=job.ids | {"error": type(exc).__name__})
            if stop_on_error:
                generation.stop()  # the engine will not end the stream: stop reading it now

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _forced(tools: Tools | None) -> str | None:
    """The JSON Schema a forced tool choice constrains the reply to (None: the model chooses). The gateway refuses
    functions whose definitions clash; a record from before it did is served as if the model chose."""
    if tools is None:
        return None
    try:
        return forced_schema(tools)
    except ValueError:
        log.warning("a forced tool choice's functions cannot be combined into one schema; the model chooses")
        return None
