"""The inference worker process: Kafka in, its engines, Kafka out (DESIGN.md §1, ``workers/<pool>``).

    chat.inference.<pool> ──Intake (group workers.<pool>)──▶ Scheduler ──engine──▶ chat.tokens
                                           └─ TransactionalCommitter: offsets + chat.events, chat.usage
    chat.control (every partition, no group) ──ControlListener──▶ Scheduler.cancel
    inherited records ──Recovery (chat.tokens, chat.events, chat.usage by timestamp)──▶ skip | resume | fresh
    every heartbeat_s ──▶ fleet.heartbeats

Five loops share one event loop: intake, control, heartbeats, the committer's
transactions, and the wait for a stop signal. A process that fronts several
engines (``PARLEY_WORKER_ENGINE_URLS``) runs one ``run_worker`` per engine, each
its own group member: a replica to the router (``run_replicas``). The pure parts (template, coalescing, watermarks, cancel
memory, closing events) live in their own modules; this one only wires them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from dataclasses import replace

from parley.kafka import EventProducer
from parley.metrics import Readiness
from parley.settings import KafkaSettings, from_env
from schemas.catalog import inference_topic
from schemas.events import InferenceRouted
from workers.control import ControlListener
from workers.engine_api import EngineClient, EngineLoad
from workers.intake import Intake
from workers.history_reader import HistoryReader, Recovery
from workers.scheduler import Scheduler
from workers.settings import TemplateSettings, WorkerSettings
from workers.sink import KafkaSink
from workers.transactions import TransactionalCommitter

log = logging.getLogger(__name__)


async def run_worker(
    worker: WorkerSettings,
    kafka: KafkaSettings,
    engine: EngineClient | None = None,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve ``chat.inference.<pool>`` until ``stop`` is set, then drain, commit and leave the group.

    ``on_ready``: called each time a heartbeat sent after the group's first assignment is acknowledged (the
    router can then place turns here); it must be idempotent (parley.metrics.Readiness is)."""
    stop = stop or asyncio.Event()
    owns_engine = engine is None
    if engine is None:
        from workers.sglang import SGLangClient  # lazily: tests and other engines do not need it

        engine = SGLangClient(worker.engine_url)
    control = await asyncio.to_thread(ControlListener, kafka, worker.cancel_memory_s)
    producer = EventProducer(kafka, **{"linger.ms": worker.linger_ms})
    # Under the topic prefix: stacks sharing a cluster never rebalance each other's workers.
    group = kafka.topic_prefix + worker.group
    committer = TransactionalCommitter(
        kafka, f"{group}.{worker.worker_id}", inference_topic(worker.pool), worker.transaction_timeout_ms
    )
    sink = KafkaSink(producer, committer)
    intake: Intake | None = None

    def finished(partition: int, offset: int) -> None:
        assert intake is not None  # nothing is accepted before the intake exists
        intake.finished(partition, offset)

    scheduler = Scheduler(
        worker, engine, sink, on_finished=finished, recover=Recovery(HistoryReader(kafka)),
        template=from_env(TemplateSettings).of(worker.pool),
    )
    scheduler.model = await _model_of(engine, worker)
    intake = Intake(
        kafka, worker.pool, group, producer, scheduler.abandon, committer.commit_offsets,
        session_timeout_ms=worker.session_timeout_ms, client_id=worker.worker_id,
    )
    await committer.start(intake)
    log.info(
        "worker started",
        extra={"worker_id": worker.worker_id, "pool": worker.pool, "group": group, "model": scheduler.model},
    )
    closing = asyncio.Event()  # set once drained: the intake and control loops end
    loops = [
        asyncio.create_task(_intake_loop(intake, scheduler, stop, closing), name="intake"),
        asyncio.create_task(_control_loop(control, scheduler, closing), name="control"),
        asyncio.create_task(_heartbeat_loop(worker, engine, scheduler, sink, intake, closing, on_ready), name="heartbeats"),
        committer.task,  # ends only by failing: another process took this worker's transactional id
    ]
    failed: BaseException | None = None
    try:
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopped, *loops], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        for task in done:
            if task is not stopped and not task.cancelled() and task.exception() is not None:
                failed = task.exception()
                log.error("worker loop failed; draining", exc_info=failed, extra={"loop": task.get_name()})
        stop.set()
        log.info("draining", extra={"running": scheduler.running, "queued": scheduler.queued})
        await scheduler.drain(worker.drain_timeout_s)
    finally:
        closing.set()
        await asyncio.gather(*loops[:-1], return_exceptions=True)
        # Every chunk of what was handed back is on the log before the partitions move: the next
        # owner's lookup (workers/recovery.py) then resumes after all of it.
        await asyncio.to_thread(producer.flush, 10.0)
        await intake.close()  # commits what finished and leaves the group, handing partitions over at once
        await asyncio.to_thread(control.close)
        await committer.close()
        await _send_heartbeat(scheduler, sink, intake=None, load=None)
        await asyncio.to_thread(producer.close)
        if owns_engine:
            await engine.close()
        log.info("worker stopped", extra={"worker_id": worker.worker_id, "finished": scheduler.finished_count})
    if failed is not None:
        raise failed


async def _intake_loop(intake: Intake, scheduler: Scheduler, stop: asyncio.Event, closing: asyncio.Event) -> None:
    # Keeps polling while draining (paused): rebalances are served and finished offsets get stored.
    while not closing.is_set():
        accepting = not stop.is_set() and scheduler.free_slots > 0 and await scheduler.engine_ready()
        for taken in await intake.poll(scheduler.free_slots, accepting):
            delivery = taken.delivery
            if isinstance(delivery.event, InferenceRouted):
                scheduler.accept(delivery.event, delivery.partition, delivery.offset, inherited=taken.inherited)
            else:  # the catalog puts nothing else here; a stray event must not hold back the watermark
                log.warning(
                    "unexpected event skipped",
                    extra={"type": type(delivery.event).__name__, "partition": delivery.partition},
                )
                intake.finished(delivery.partition, delivery.offset)


async def _control_loop(control: ControlListener, scheduler: Scheduler, closing: asyncio.Event) -> None:
    while not closing.is_set():
        for cancel in await asyncio.to_thread(control.poll, 0.2):
            scheduler.cancel(cancel.request_id, cancel.reason)


async def _heartbeat_loop(
    worker: WorkerSettings,
    engine: EngineClient,
    scheduler: Scheduler,
    sink: KafkaSink,
    intake: Intake,
    closing: asyncio.Event,
    on_ready: Callable[[], None] | None = None,
) -> None:
    while not closing.is_set():
        try:
            load = await asyncio.wait_for(engine.load(), timeout=worker.heartbeat_s)
        except Exception:
            load = None  # the heartbeat still says the worker is alive; the router sees no KV figures
        if not scheduler.model:
            scheduler.model = await _model_of(engine, worker, quiet=True)
        sent = await _send_heartbeat(scheduler, sink, intake, load)
        if on_ready is not None and intake.assigned:  # every beat, not the first only: that one may be lost
            sent.add_done_callback(lambda fut, ready=on_ready: None if fut.cancelled() or fut.exception() else ready())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closing.wait(), timeout=worker.heartbeat_s)


async def _send_heartbeat(
    scheduler: Scheduler, sink: KafkaSink, intake: Intake | None, load: EngineLoad | None
) -> asyncio.Future[object]:
    """The heartbeat's delivery. Not awaited: one that cannot be delivered is superseded by the next anyway."""
    beat = scheduler.heartbeat(
        partitions=intake.owned if intake else [], read_to=intake.read_to() if intake else {}, load=load
    )
    sent = sink.send_nowait(beat)
    sent.add_done_callback(_log_lost_heartbeat)
    return sent


def _log_lost_heartbeat(fut: asyncio.Future[object]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("heartbeat not delivered", extra={"error": str(fut.exception())})


async def _model_of(engine: EngineClient, worker: WorkerSettings, quiet: bool = False) -> str:
    try:
        return (await asyncio.wait_for(engine.model_info(), timeout=5.0)).model
    except Exception as exc:
        if not quiet:
            log.warning(
                "engine did not say its model; using PARLEY_WORKER_MODEL",
                extra={"engine_url": worker.engine_url, "error": type(exc).__name__, "model": worker.model_name},
            )
        return ""


# ------------------------------------------------------------------ process entry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers", description="Run one inference worker.")
    parser.add_argument("--pool", help="pool to serve (PARLEY_WORKER_POOL)")
    parser.add_argument(
        "--engine-url", action="append", help="an engine's base URL; repeat for several (PARLEY_WORKER_ENGINE_URLS)"
    )
    parser.add_argument("--worker-id", help="stable worker id (PARLEY_WORKER_ID)")
    parser.add_argument("--max-concurrency", type=int, help="generations at once (PARLEY_WORKER_MAX_CONCURRENCY)")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace, environ: dict[str, str] | None = None) -> WorkerSettings:
    """Environment first, then the command line on top."""
    worker = from_env(WorkerSettings, environ)
    overrides = {
        name: value
        for name, value in (
            ("pool", args.pool),
            ("engine_urls", ",".join(args.engine_url) if args.engine_url else None),
            ("worker_id", args.worker_id),
            ("max_concurrency", args.max_concurrency),
        )
        if value is not None
    }
    return replace(worker, **overrides) if overrides else worker


async def run_replicas(worker: WorkerSettings, kafka: KafkaSettings, stop: asyncio.Event) -> None:
    """``run_worker`` for each engine of ``worker`` until ``stop``; one failing stops (drains) them all, then raises."""
    replicas = worker.replicas()
    readiness = Readiness(len(replicas))
    tasks = [
        asyncio.create_task(
            run_worker(replica, kafka, stop=stop, on_ready=lambda n=n: readiness.ready(n)), name=replica.worker_id
        )
        for n, replica in enumerate(replicas)
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise failures[0]


async def serve(worker: WorkerSettings, kafka: KafkaSettings) -> None:
    """Every engine's ``run_worker`` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run_replicas(worker, kafka, stop)


def main(argv: list[str] | None = None) -> None:
    from parley.logs import setup_logging

    from parley import keys, metrics, ops, schema_registry

    setup_logging("worker")
    keys.install_from_env()
    settings, kafka = settings_from(parse_args(argv)), from_env(KafkaSettings)
    schema_registry.install(kafka)
    if metrics.serve_from_env("worker") is not None:
        ops.register_lag(kafka, [kafka.topic_prefix + settings.group])
    asyncio.run(serve(settings, kafka))
