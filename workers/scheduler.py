"""The jobs of one worker: admit, generate, cancel, hand back. No Kafka here.

The Kafka shell (workers/worker.py) feeds it routed requests with their
partition and offset and cancels from chat.control; it calls back
``on_finished(partition, offset)`` once a request's closing events are all
acknowledged, which is when the shell may move the commit watermark.

A job's life::

    accept ──(inherited: recover)──▶ queued ──(a slot frees)──▶ running ──▶ settled (committed), final chunk acked ──▶ on_finished
                 │                          │
               cancel: closed as            cancel: engine.abort(rid); the stream ends
               cancelled, no engine         as cancelled (or is cut after abort_grace_s)
    abandon (partition revoked, drain deadline): stopped, no events, no on_finished

An *inherited* record (already in its partition when this worker was assigned
it: a previous owner may have started it) is first looked up with
``recover`` (workers/recovery.py): finished ones close at once (producing only
closing events the previous owner did not get out), partial ones are queued as
the next attempt continuing from the text so far, fresh ones as they came.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace

from parley.errors import BrokerUnavailable
from parley.ids import engine_rid
from parley.logs import trace_context
from parley.lru import LRU
from schemas.endings import ENGINE_UNAVAILABLE
from schemas.events import Event, InferenceRouted, TokenChunk, WorkerHeartbeat
from workers.cancels import CancelMemory
from workers.chat_template import STOP, render_prompt
from workers.coalesce import Coalescer, Piece
from workers.engine_api import EngineClient, EngineLoad, GenerateRequest
from workers.generation import Generation
from workers.outcome import Outcome, terminal_events
from workers.recovery import Finished, Resume, Verdict
from workers.settings import WorkerSettings
from workers.sink import EventSink
from workers.telemetry import record_load, record_outcome
from workers.transactions import Fenced

log = logging.getLogger(__name__)

#: Seconds between engine health probes while the engine is suspected down.
HEALTH_PROBE_S = 1.0
#: Closed attempts remembered to skip duplicate records of them (a few minutes of a busy worker).
DONE_MEMORY = 20_000
#: How long abandoning waits for cancelled jobs to stop.
ABANDON_TIMEOUT_S = 10.0


@dataclass(eq=False)
class Job:
    routed: InferenceRouted
    partition: int
    offset: int
    rid: str
    cancel_reason: str | None = None
    generation: Generation | None = None  # set once the engine was asked
    task: asyncio.Task[None] | None = None
    cut_timer: asyncio.TimerHandle | None = None
    resume_tokens: int = 0  # tokens of the resume text, counted into the completion's usage

    @property
    def request_id(self) -> str:
        return self.routed.request.request_id

    @property
    def ids(self) -> dict[str, object]:
        """What a log line may say about a job: ids and positions, never text."""
        return {"request_id": self.request_id, "rid": self.rid, "partition": self.partition, "offset": self.offset}


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
    ) -> None:
        self._settings = settings
        self._engine = engine
        self._sink = sink
        self._on_finished = on_finished
        self._clock = clock
        self._wall = wall
        self._recover = recover
        #: Model the engine serves (from model_info); the shell refreshes it.
        self.model = model
        self._jobs: dict[tuple[int, int], Job] = {}
        self._queue: deque[Job] = deque()
        self._running = 0  # jobs whose generation holds an engine slot
        self._cancels = CancelMemory(settings.cancel_memory_s)
        self._background: set[asyncio.Task[None]] = set()
        self._draining = False
        self._engine_suspect = True  # probe health before the first request
        self._last_probe = float("-inf")
        self.finished_count = 0
        self.duplicates_skipped = 0
        #: request id → the highest attempt this worker closed (events acknowledged): a later record of
        #: that attempt or an earlier one is a duplicate (a resumed request's original record comes too).
        self._done: LRU[str, int] = LRU(DONE_MEMORY)

    # ------------------------------------------------------------ state

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def held(self) -> int:
        """Records held in any state; what counts against the capacity."""
        return len(self._jobs)

    @property
    def free_slots(self) -> int:
        return max(0, self._settings.capacity - len(self._jobs))

    @property
    def draining(self) -> bool:
        return self._draining

    # ------------------------------------------------------------ intake

    def accept(self, routed: InferenceRouted, partition: int, offset: int, *, inherited: bool = False) -> None:
        """Take a record; ``inherited``: a previous owner of the partition may have started it."""
        if self._draining:
            return  # not started, so never finished: the next owner of the partition takes it
        rid = engine_rid(routed.request.request_id, routed.request.attempt)
        if self._known(routed.request.request_id, routed.request.attempt):
            # A second record of one attempt (a processor re-emitted it after a restart): generating it
            # again would interleave two streams of the same attempt. Its offset is done at once.
            log.info("duplicate record of a request skipped", extra={"rid": rid, "partition": partition, "offset": offset})
            self.duplicates_skipped += 1
            self._on_finished(partition, offset)
            return
        job = Job(routed, partition, offset, rid)
        self._jobs[(partition, offset)] = job
        if inherited and self._recover is not None:
            job.task = asyncio.create_task(
                self._recovered(job), name=f"recovery {job.rid}", context=trace_context(job.routed.trace_id)
            )
            return
        self._admit(job)

    def _known(self, request_id: str, attempt: int) -> bool:
        """Whether this worker holds or closed this attempt of the request, or a later one."""
        done = self._done.get(request_id)
        if done is not None and done >= attempt:
            return True
        return any(j.request_id == request_id and j.routed.request.attempt >= attempt for j in self._jobs.values())

    def _closed(self, job: Job) -> None:
        attempt = job.routed.request.attempt
        self._done.put(job.request_id, max(attempt, self._done.get(job.request_id) or 0))

    def _admit(self, job: Job) -> None:
        job.cancel_reason = self._cancels.reason(job.request_id, self._clock())
        if job.cancel_reason is not None:
            log.info("request was cancelled before it arrived", extra=job.ids)
            self._launch(job, engine_slot=False)
            return
        self._queue.append(job)
        self._start_ready()

    def cancel(self, request_id: str, reason: str) -> None:
        """A GenerationCancelRequested: remembered for late requests, applied to held ones."""
        self._cancels.remember(request_id, reason, self._clock())
        for job in [j for j in self._jobs.values() if j.request_id == request_id]:
            if job.cancel_reason is not None:
                continue
            job.cancel_reason = reason
            if job in self._queue:
                self._queue.remove(job)
                self._launch(job, engine_slot=False)  # closes it as cancelled without the engine
            elif job.generation is not None:
                log.info("aborting a running generation", extra=job.ids | {"reason": reason})
                job.cut_timer = asyncio.get_running_loop().call_later(
                    self._settings.abort_grace_s, job.generation.stop
                )
                self._spawn(self._abort(job, stop_on_error=True))

    async def engine_ready(self) -> bool:
        """False while the engine is suspected down; probes its health at most every HEALTH_PROBE_S."""
        if not self._engine_suspect:
            return True
        now = self._clock()
        if now - self._last_probe < HEALTH_PROBE_S:
            return False
        self._last_probe = now
        try:
            async with asyncio.timeout(5.0):
                healthy = await self._engine.health()
        except Exception:
            healthy = False
        if healthy:
            self._engine_suspect = False
            log.info("engine is healthy; taking requests", extra={"engine_url": self._settings.engine_url})
        else:
            log.warning(
                "engine is not healthy; not taking requests (check the engine at PARLEY_WORKER_ENGINE_URL)",
                extra={"engine_url": self._settings.engine_url},
            )
        return healthy

    # ------------------------------------------------------------ hand-back

    async def abandon(self, partitions: Collection[int]) -> int:
        """Stop every job of ``partitions`` without closing events or on_finished; returns how many."""
        jobs = [j for j in self._jobs.values() if j.partition in partitions]
        for job in jobs:
            if job in self._queue:
                self._queue.remove(job)
            self._jobs.pop((job.partition, job.offset), None)
        tasks = [j.task for j in jobs if j.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=ABANDON_TIMEOUT_S)
            if stuck:  # a bug, but the caller (a rebalance) must not wait forever
                log.error("abandoned jobs did not stop", extra={"count": len(stuck)})
        # Free the engine's slots; the new owner submits under the same rid to its own engine.
        await asyncio.gather(*(self._abort(j) for j in jobs if j.generation is not None))
        if jobs:
            log.info("abandoned requests", extra={"partitions": sorted(partitions), "count": len(jobs)})
        return len(jobs)

    async def drain(self, timeout: float) -> None:
        """Take nothing more; let running jobs finish within ``timeout``, then abandon the rest."""
        self._draining = True
        for job in self._queue:  # never started: left for the next owner
            self._jobs.pop((job.partition, job.offset), None)
        self._queue.clear()
        tasks = [j.task for j in self._jobs.values() if j.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        left = {j.partition for j in self._jobs.values()}
        if left:
            log.warning("drain deadline passed (PARLEY_WORKER_DRAIN_TIMEOUT_S)", extra={"abandoned": len(self._jobs)})
            await self.abandon(left)
        await asyncio.gather(*self._background, return_exceptions=True)

    def heartbeat(self, *, partitions: list[int], load: EngineLoad | None) -> WorkerHeartbeat:
        record_load(pool=self._settings.pool, worker=self._settings.worker_id, queued=len(self._queue), running=self._running)
        return WorkerHeartbeat(
            worker_id=self._settings.worker_id,
            pool=self._settings.pool,
            model=self.model or self._settings.model_name,
            partitions=partitions,
            running=self._running,
            queued=len(self._queue),
            max_running=self._settings.max_concurrency,
            kv_usage=load.kv_usage if load else 0.0,
            cache_hit_rate=load.cache_hit_rate if load else 0.0,
            draining=self._draining,
        )

    # ------------------------------------------------------------ a job's life

    async def _recovered(self, job: Job) -> None:
        """Look up what earlier attempts did, then close, resume or queue ``job``."""
        assert self._recover is not None
        delay = 0.5
        while True:
            try:
                found = await self._recover(job.routed)
                break
            except asyncio.CancelledError:
                raise  # abandoned
            except BrokerUnavailable as exc:  # nothing could be produced either: wait for the broker
                log.warning("redelivered request not looked up; retrying", extra=job.ids | {"error": str(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
            except Exception:
                # A bug: start over visibly (a new attempt from nothing) rather than hold the partition.
                log.exception("redelivered request could not be looked up; restarting it", extra=job.ids)
                found = Resume(attempt=job.routed.request.attempt + 1, text="", tokens=0)
                break
        job.task = None
        if isinstance(found, Finished):
            try:
                await self._settle(found.missing, job)
            except Fenced:
                self._jobs.pop((job.partition, job.offset), None)
                return
            except Exception:  # a bug, as in _run: let the record go rather than hold back the commits
                log.exception("could not resend the closing events of a finished request", extra=job.ids)
            log.info("redelivered request had finished; not generated again", extra=job.ids | {"resent": len(found.missing)})
            if self._jobs.pop((job.partition, job.offset), None) is not None:
                self.finished_count += 1
                self._closed(job)
                self._on_finished(job.partition, job.offset)
            return
        if isinstance(found, Resume):
            request = replace(job.routed.request, attempt=found.attempt, resume_text=found.text)
            job.routed = replace(job.routed, request=request)
            job.rid = engine_rid(request.request_id, request.attempt)
            job.resume_tokens = found.tokens
            log.info("resuming a redelivered request", extra=job.ids | {"attempt": found.attempt, "offset_chars": len(found.text)})
        if self._draining:
            self._jobs.pop((job.partition, job.offset), None)  # handed back: the next owner looks it up again
            return
        if (job.partition, job.offset) in self._jobs:
            self._admit(job)

    def _start_ready(self) -> None:
        while self._queue and self._running < self._settings.max_concurrency and not self._draining:
            self._launch(self._queue.popleft(), engine_slot=True)

    def _launch(self, job: Job, *, engine_slot: bool) -> None:
        # The slot is taken here, not when the task first runs, so one _start_ready cannot overfill the engine.
        if engine_slot:
            self._running += 1
        job.task = asyncio.create_task(
            self._run(job, engine_slot), name=f"generation {job.rid}", context=trace_context(job.routed.trace_id)
        )

    async def _run(self, job: Job, engine_slot: bool) -> None:
        finished = False
        try:
            # A cancel may land between launch and here: then the engine is never asked.
            if job.cancel_reason is None:
                outcome, seq, chars, queue_ms = await self._generate(job)
            else:
                outcome = Outcome(finish_reason="cancelled")
                seq, chars, queue_ms = 0, len(job.routed.request.resume_text), self._queue_ms(job)
            new_tokens = outcome.usage.completion_tokens  # before resumed(): this attempt's own tokens
            outcome = outcome.resumed(job.resume_tokens)
            model = self.model or self._settings.model_name or job.routed.model
            record_outcome(outcome, pool=self._settings.pool, model=model, new_tokens=new_tokens)
            completed, final, usage = terminal_events(
                job.routed,
                outcome,
                seq=seq,
                offset_chars=chars,
                replica=self._settings.worker_id,
                model=model,
                queue_ms=queue_ms,
            )
            await self._settle((completed, usage, final), job)
            finished = True
            log.info(
                "generation ended",
                extra=job.ids
                | {
                    "finish_reason": outcome.finish_reason,
                    "error_code": outcome.error_code,
                    "completion_tokens": outcome.usage.completion_tokens,
                    "chunks": seq + 1,
                },
            )
        except asyncio.CancelledError:
            raise  # abandoned: the partition's next owner redoes it
        except Fenced:
            log.error("closing events not committed: this worker was replaced; leaving the request", extra=job.ids)
            self._jobs.pop((job.partition, job.offset), None)
        except Exception:
            # A bug, not an outage (produce failures are retried in _deliver): a redelivery would fail
            # the same way, so the record is let go rather than holding back every later commit.
            log.exception("could not close a generation; its record is skipped", extra=job.ids)
            finished = True
        finally:
            if engine_slot:
                self._running -= 1
            if job.cut_timer is not None:
                job.cut_timer.cancel()
            if finished and self._jobs.pop((job.partition, job.offset), None) is not None:
                self.finished_count += 1
                self._closed(job)
                self._on_finished(job.partition, job.offset)
            self._start_ready()

    async def _generate(self, job: Job) -> tuple[Outcome, int, int, float]:
        req = job.routed.request
        request = GenerateRequest(
            rid=job.rid,
            text=render_prompt(req.messages, req.resume_text),
            max_new_tokens=max(1, req.max_tokens - job.resume_tokens),  # the cap is on the whole reply
            temperature=self._settings.temperature,
            stop=STOP,
        )
        coalescer = Coalescer(
            self._settings.coalesce_ms / 1000, self._settings.coalesce_tokens, start_chars=len(req.resume_text)
        )
        acks: list[asyncio.Future[object]] = []

        def emit(piece: Piece) -> None:
            acks.append(self._sink.send_nowait(self._chunk(job, piece)))

        queue_ms = self._queue_ms(job)
        job.generation = Generation(self._engine, request, coalescer, emit, self._clock)
        outcome = await job.generation.run()
        if job.cancel_reason is not None:
            outcome = outcome.as_cancelled()
        if outcome.error_code == ENGINE_UNAVAILABLE:
            self._engine_suspect = True  # take no more records until its health answers again
        # Every chunk is acknowledged before GenerationCompleted: the stream is whole when the reply lands.
        lost = [r for r in await asyncio.gather(*acks, return_exceptions=True) if isinstance(r, BaseException)]
        if lost:
            log.warning("token chunks were not acknowledged", extra=job.ids | {"lost": len(lost)})
        return outcome, coalescer.next_seq, coalescer.chars, queue_ms

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
        )

    def _queue_ms(self, job: Job) -> float:
        """From the router's InferenceRouted to now (engine submission)."""
        return max(0.0, self._wall() * 1000 - job.routed.occurred_at / 1000)

    async def _settle(self, events: Sequence[Event], job: Job) -> None:
        """Close a request: the events that settle it in one fenced transaction (all or none, and
        only while this worker owns its partition), then its final chunk, so a reader who sees the
        stream end finds the reply and its usage on the log (DESIGN.md §5)."""
        chunks = [e for e in events if isinstance(e, TokenChunk)]
        settling = [e for e in events if not isinstance(e, TokenChunk)]
        if settling:
            await self._retrying(lambda: self._sink.commit(settling), job, "the settling transaction")
        for chunk in chunks:
            await self._deliver(chunk, job)

    async def _retrying(self, attempt: Callable[[], Awaitable[object]], job: Job, what: str) -> None:
        delay = 0.5
        while True:
            try:
                await attempt()
                return
            except BrokerUnavailable as exc:
                log.warning(
                    f"{what} not acknowledged; retrying",
                    extra=job.ids | {"error": str(exc), "retry_in_s": delay},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _deliver(self, event: Event, job: Job) -> None:
        """Produce and await the ack, retrying while the broker is away: these events must not be skipped."""
        await self._retrying(lambda: self._sink.send(event), job, type(event).__name__)

    async def _abort(self, job: Job, stop_on_error: bool = False) -> None:
        try:
            async with asyncio.timeout(5.0):
                await self._engine.abort(job.rid)
        except Exception as exc:
            log.warning("engine abort failed", extra=job.ids | {"error": type(exc).__name__})
            if stop_on_error and job.generation is not None:
                job.generation.stop()  # the engine will not end the stream: stop reading it now

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)
