"""The bookkeeping of one worker's jobs, as a pure core: records and events in, actions out.

No asyncio, no engine, no Kafka: ``JobBook`` decides which record runs, waits,
is looked up, is closed without the engine or is let go; the runner
(workers/scheduler.py) carries the actions out and reports back with
``recovered`` and ``ended``. A job's life::

    accept ──(inherited)──▶ looking up ──▶ queued ──(a slot frees)──▶ running ──▶ ended ──▶ Done
                                             │                          │
                           cancel: Run without an engine slot    cancel: Abort; it ends as cancelled
    abandon (partition revoked, drain deadline): dropped, no Done

``Done(partition, offset)`` is the one way out that lets the shell move its
commit watermark past a record.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, replace
from enum import Enum

from parley.ids import engine_rid
from parley.lru import LRU
from schemas.events import Event, InferenceRouted
from workers.cancels import CancelMemory
from workers.recovery import Finished, Resume, Verdict

log = logging.getLogger(__name__)

#: Closed attempts remembered to skip duplicate records of them (a few minutes of a busy worker).
DONE_MEMORY = 20_000


class State(Enum):
    LOOKING_UP = "looking up"  # inherited: what a previous owner did is being read
    QUEUED = "queued"  # waits for an engine slot
    RUNNING = "running"  # its task runs: generating, or closing as cancelled without the engine
    CLOSING = "closing"  # found finished: its missing closing events are being sent again


@dataclass(eq=False)
class Job:
    routed: InferenceRouted
    partition: int
    offset: int
    rid: str
    state: State = State.QUEUED
    cancel_reason: str | None = None
    engine_slot: bool = False  # holds one of max_concurrency engine slots
    resume_tokens: int = 0  # tokens of the resume text, counted into the completion's usage

    @property
    def request_id(self) -> str:
        return self.routed.request.request_id

    @property
    def key(self) -> tuple[int, int]:
        return (self.partition, self.offset)

    @property
    def ids(self) -> dict[str, object]:
        """What a log line may say about a job: ids and positions, never text."""
        return {"request_id": self.request_id, "rid": self.rid, "partition": self.partition, "offset": self.offset}


# ------------------------------------------------------------------ actions


@dataclass(frozen=True)
class Done:
    """The record at (partition, offset) is finished: the shell may commit past it."""

    partition: int
    offset: int


@dataclass(frozen=True)
class LookUp:
    """Read what earlier owners did with ``job``, then call ``recovered``."""

    job: Job


@dataclass(frozen=True)
class Run:
    """Start ``job``'s task: generate, or (``job.cancel_reason`` set) close it as cancelled without the engine."""

    job: Job


@dataclass(frozen=True)
class Abort:
    """``job`` is running and was cancelled: abort its engine request."""

    job: Job


@dataclass(frozen=True)
class Resend:
    """``job`` had finished; produce ``events`` (its missing closing events), then call ``ended``."""

    job: Job
    events: tuple[Event, ...]


Action = Done | LookUp | Run | Abort | Resend


class JobBook:
    def __init__(self, *, capacity: int, max_concurrency: int, cancel_memory_s: float) -> None:
        self._capacity = capacity
        self._max_concurrency = max_concurrency
        self._jobs: dict[tuple[int, int], Job] = {}
        self._queue: deque[Job] = deque()
        self._running = 0  # jobs holding an engine slot
        self._cancels = CancelMemory(cancel_memory_s)
        #: request id → the highest attempt this worker closed: a later record of that attempt or an
        #: earlier one is a duplicate (a resumed request's original record comes too).
        self._done: LRU[str, int] = LRU(DONE_MEMORY)
        self.draining = False
        self.finished_count = 0
        self.duplicates_skipped = 0

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
        return max(0, self._capacity - len(self._jobs))

    def partitions(self) -> set[int]:
        return {j.partition for j in self._jobs.values()}

    # ------------------------------------------------------------ events in

    def accept(self, routed: InferenceRouted, partition: int, offset: int, *, look_up: bool, now: float) -> list[Action]:
        """Take a record; ``look_up``: a previous owner of the partition may have started it."""
        if self.draining:
            return []  # not started, so never finished: the next owner of the partition takes it
        request = routed.request
        rid = engine_rid(request.request_id, request.attempt)
        if self._known(request.request_id, request.attempt):
            # A second record of one attempt (a processor re-emitted it after a restart): generating it
            # again would interleave two streams of the same attempt. Its offset is done at once.
            log.info("duplicate record of a request skipped", extra={"rid": rid, "partition": partition, "offset": offset})
            self.duplicates_skipped += 1
            return [Done(partition, offset)]
        job = Job(routed, partition, offset, rid)
        self._jobs[job.key] = job
        if look_up:
            job.state = State.LOOKING_UP
            return [LookUp(job)]
        return self._admit(job, now)

    def cancel(self, request_id: str, reason: str, now: float) -> list[Action]:
        """A GenerationCancelRequested: remembered for late requests, applied to held ones."""
        self._cancels.remember(request_id, reason, now)
        actions: list[Action] = []
        for job in [j for j in self._jobs.values() if j.request_id == request_id and j.cancel_reason is None]:
            job.cancel_reason = reason
            if job.state is State.QUEUED:
                self._queue.remove(job)
                job.state = State.RUNNING
                actions.append(Run(job))  # closes it as cancelled without the engine
            elif job.state is State.RUNNING:
                actions.append(Abort(job))
        return actions

    def recovered(self, job: Job, found: Verdict, now: float) -> list[Action]:
        """What the lookup of ``job`` found."""
        if self._jobs.get(job.key) is not job:
            return []  # abandoned meanwhile
        if isinstance(found, Finished):
            job.state = State.CLOSING
            return [Resend(job, found.missing)]
        if isinstance(found, Resume):
            request = replace(job.routed.request, attempt=found.attempt, resume_text=found.text)
            job.routed = replace(job.routed, request=request)
            job.rid = engine_rid(request.request_id, request.attempt)
            job.resume_tokens = found.tokens
            log.info("resuming a redelivered request", extra=job.ids | {"attempt": found.attempt, "offset_chars": len(found.text)})
        if self.draining:
            self._jobs.pop(job.key, None)  # handed back: the next owner looks it up again
            return []
        return self._admit(job, now)

    def ended(self, job: Job, *, finished: bool) -> list[Action]:
        """``job``'s task is over; ``finished``: its closing events are acknowledged (or it was let go)."""
        if job.engine_slot:
            job.engine_slot = False
            self._running -= 1
        actions: list[Action] = []
        if finished and self._jobs.get(job.key) is job:
            del self._jobs[job.key]
            self.finished_count += 1
            attempt = job.routed.request.attempt
            self._done.put(job.request_id, max(attempt, self._done.get(job.request_id) or 0))
            actions.append(Done(job.partition, job.offset))
        return actions + self._start_ready()

    def dropped(self, job: Job) -> None:
        """``job`` is let go unfinished (this worker was fenced): the partition's next owner redoes it."""
        if self._jobs.get(job.key) is job:
            del self._jobs[job.key]

    def abandon(self, partitions: Collection[int]) -> list[Job]:
        """Forget every job of ``partitions`` (no Done); the runner stops their tasks."""
        jobs = [j for j in self._jobs.values() if j.partition in partitions]
        for job in jobs:
            if job.state is State.QUEUED:
                self._queue.remove(job)
            del self._jobs[job.key]
        return jobs

    def drain(self) -> None:
        """Take nothing more; what never started is forgotten, left for the next owner."""
        self.draining = True
        for job in self._queue:
            del self._jobs[job.key]
        self._queue.clear()

    # ------------------------------------------------------------ inside

    def _known(self, request_id: str, attempt: int) -> bool:
        """Whether this worker holds or closed this attempt of the request, or a later one."""
        done = self._done.get(request_id)
        if done is not None and done >= attempt:
            return True
        return any(j.request_id == request_id and j.routed.request.attempt >= attempt for j in self._jobs.values())

    def _admit(self, job: Job, now: float) -> list[Action]:
        job.cancel_reason = self._cancels.reason(job.request_id, now)
        if job.cancel_reason is not None:
            log.info("request was cancelled before it arrived", extra=job.ids)
            job.state = State.RUNNING
            return [Run(job)]
        job.state = State.QUEUED
        self._queue.append(job)
        return self._start_ready()

    def _start_ready(self) -> list[Action]:
        # The slot is taken here, not when the task first runs, so one call cannot overfill the engine.
        actions: list[Action] = []
        while self._queue and self._running < self._max_concurrency and not self.draining:
            job = self._queue.popleft()
            job.state = State.RUNNING
            job.engine_slot = True
            self._running += 1
            actions.append(Run(job))
        return actions
