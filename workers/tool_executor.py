"""The tool executor: each call the permission broker cleared is run at most once, or reported as unknown.

Consumer group ``tools`` on ``chat.tools`` (ToolCallCleared, keyed by conversation). For each record, one
at a time per process (DESIGN.md §13):

1. **Look up** what happened to the call: chat.events of the conversation's partition, from the cleared
   event's time (less ``CLOCK_SKEW_S``) to the end (read_committed). A ToolCallFinished: done, only the
   offset is committed. A ToolCallStarted without a finish: an earlier owner started it and nobody knows
   whether it took effect. A tool the operator declared ``idempotent`` (it honours the call id as its
   idempotency key) is asked again with the same key; any other ends ``unknown``, and the model and the
   user are told so. It is never run blindly a second time.
2. **Start**: ToolCallStarted is committed in a Kafka transaction that also commits the group's offset of
   the record *at* the record (not past it), with the consumer's group metadata (KIP-447). A member that
   lost the partition without knowing it (paused, cut off) is fenced there: its transaction aborts, and it
   never calls the tool. The new owner's offset fetch waits for that transaction to end (require_stable),
   so its lookup sees a Started that did commit.
3. **Call** the tool with the call id as the idempotency key (HTTP ``Idempotency-Key``; workers/tool_runners.py).
4. **Finish**: ToolCallFinished (ok, error, or unknown when the answer was lost) and the offset past the
   record, in one fenced transaction. If this transaction cannot commit, the next owner finds the Started
   and reports unknown (or asks an idempotent tool again): the effect still happened once.

A step that fails (the broker away, the group rebalancing, a lookup that cannot finish) abandons the
record: the consumer is rewound to it and polled again, so that a member that lost its partitions learns
so and rejoins, and the record is handled again from the lookup by whoever owns it then; nothing is run
on a guess. What this process itself started and ran is remembered until its finish commits, so that a
record it handles again after an abandoned step is neither run twice nor reported unknown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from parley import ids, keys, metrics, ops, schema_registry, tool_registry
from parley.consumer import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, dead_letter_for, reader, records_since
from parley.errors import BadInput, BrokerUnavailable
from parley.kafka import producer_config
from parley.logs import setup_logging
from parley.metrics import Readiness
from parley.partitioning import partition_for
from parley.settings import KafkaSettings, from_env
from parley.transport_security import kafka_config
from parley.tool_registry import ToolConfig, ToolSpec
from schemas import catalog, codec
from schemas.catalog import dlq_name
from schemas.events import Event, ToolCallCleared, ToolCallFinished, ToolCallStarted
from workers.tool_runners import HttpTool, NotSent, OutcomeUnknown, Runner, ToolResult, UserRunner

log = logging.getLogger(__name__)

GROUP = "tools"
#: How far before a cleared event's time its call's Started may be stamped (clocks of two hosts).
CLOCK_SKEW_S = 60.0
#: How long one lookup, or one transaction's step, may take before it is tried again.
CALL_TIMEOUT_S = 15.0
#: A transaction left open by an executor that died holds back every read_committed reader of its
#: chat.events partition until the coordinator aborts it: ours are one or two records, so 10 s (the workers').
TRANSACTION_TIMEOUT_MS = 10_000
#: A second producer failure for good this soon after a replacement means another instance holds the id.
FENCE_WINDOW_S = 60.0
SESSION_TIMEOUT_MS = 15_000
#: Pauses before a record whose step failed is handled again.
FIRST_PAUSE_S, MAX_PAUSE_S = 0.2, 5.0
#: What the model is told when nobody can know whether the tool acted.
UNKNOWN = (
    "This call was started but its outcome is unknown (the executor was interrupted): it may or may not have "
    "taken effect, and it was not repeated."
)


@dataclass(frozen=True)
class Found:
    started: bool
    finished: bool


class Abandoned(Exception):
    """A step failed: the record is read again from the group's commit by whoever owns its partition then."""


#: How a process builds the runners of the built-ins that read the users' data (kind → factory): they need
#: Cassandra and the streams' search and memory, a layer above this one, so streams/tool_executor.py hands
#: them in; a plain ``python -m workers.tool_executor`` has none, and answers their calls with an error.
Factories = Mapping[str, Callable[[ToolSpec], Any]]
#: (organisation, name) → the organisation's own tool of that name (parley/org_tools.py), None if it has none;
#: raises when its store cannot be read. Also handed in by streams/tool_executor.py.
OrgSpecs = Callable[[str, str], Awaitable[ToolSpec | None]]


class NoRunner(Exception):
    """This process cannot run the tool's kind (said to the model as an error, never a crash)."""


def runner_for(spec: ToolSpec, config: ToolConfig, factories: Factories | None = None) -> Runner | UserRunner:
    if spec.kind in tool_registry.USER_KINDS:
        if factories is None or spec.kind not in factories:
            raise NoRunner(f"this executor does not run {spec.kind} tools (start it as python -m streams.tool_executor)")
        runner: UserRunner = factories[spec.kind](spec)
        return runner
    if spec.kind == "http":
        return HttpTool(spec)
    if spec.kind == "mcp":
        from workers.tool_mcp import McpRunner

        guard = config.allow_networks if spec.guarded else None  # an organisation's server: the SSRF guard
        return McpRunner(spec.url, spec.remote or spec.name, timeout_s=spec.timeout_s, guard=guard)
    if spec.kind == "fetch":
        from workers.tool_fetch import UrlFetcher  # only a process that runs the built-in needs its parser

        return UrlFetcher(allow_networks=config.allow_networks, timeout_s=spec.timeout_s)
    raise ValueError(f"no runner for tools of kind {spec.kind!r}")


def event_id(call_id: str, what: str) -> str:
    return str(uuid.uuid5(ids.NS, f"tool:{call_id}:{what}"))


class Executor:
    def __init__(
        self, kafka: KafkaSettings, config: ToolConfig, instance: str, factories: Factories | None = None,
        org_specs: OrgSpecs | None = None,
    ) -> None:
        self._kafka, self._config, self._instance = kafka, config, instance
        self._factories, self._org_specs = factories, org_specs
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tool-executor")
        self._events_topic = kafka.topic("chat.events")
        self._tools_topic = kafka.topic("chat.tools")
        self._partitions = catalog.TOPICS["chat.events"].partitions
        longest = max((s.timeout_s for s in config.tools.values()), default=30.0)
        self._consumer = Consumer(
            kafka_config(kafka)
            | {
                "group.id": kafka.topic(GROUP),
                "enable.auto.commit": False,  # committed in the transactions only
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                # A call may take its tool's whole timeout between two polls.
                "max.poll.interval.ms": int((longest + 4 * CALL_TIMEOUT_S) * 1000),
                # A member that died without leaving gives its partitions up this soon (the processors' 15 s).
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": SESSION_TIMEOUT_MS // 3,
            }
        )
        self._ready = Readiness()
        # Ready (parley_ready 1) once the group has assigned this member its partitions, none included.
        self._consumer.subscribe([self._tools_topic], on_assign=lambda _c, _p: self._ready.ready())
        self._producer_config = producer_config(
            kafka,
            **{
                "transactional.id": f"{kafka.topic(GROUP)}.{instance}",
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "delivery.timeout.ms": TRANSACTION_TIMEOUT_MS,  # deliveries fit inside a transaction
            },
        )
        self._producer = Producer(self._producer_config)
        self._lookup = reader(kafka, "tool-lookup")
        self._runners: dict[str, Runner | UserRunner] = {}
        self._replaced_at: float | None = None
        self._initialised = False
        # Calls this process started (None) or ran (their result, with the events it commits), until their
        # finish is committed: a finish tried again commits the same events, never a second run's.
        self._mine: dict[str, ToolResult | None] = {}

    async def _blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def run(self, stop: asyncio.Event) -> None:
        await self._blocking(self._producer.init_transactions, CALL_TIMEOUT_S)
        self._initialised = True
        log.info("tool executor ready", extra={"instance": self._instance})
        pause = FIRST_PAUSE_S
        while not stop.is_set():
            msg: Message | None = await self._blocking(self._consumer.poll, 0.5)
            if msg is None or msg.error() is not None:
                continue
            try:
                await self._handle(msg)
                pause = FIRST_PAUSE_S
            except Abandoned as abandoned:
                log.warning("a tool step failed; the record is read again", extra={"error_type": str(abandoned)})
                await self._blocking(self._rewind, msg)
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_S)
        await self._blocking(self._close)

    def _rewind(self, msg: Message) -> None:
        """The consumer back at ``msg``; after a rebalance took its partition, nothing to do: its next owner
        reads it from the commit (and if the partition comes back, from the commit too)."""
        try:
            self._consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
        except KafkaException:
            pass

    def _replace_producer(self) -> None:
        """A new producer with the same transactional id; its init (in the next step) aborts whatever the
        old one left open."""
        self._producer = Producer(self._producer_config)
        self._initialised = False

    def _close(self) -> None:
        self._consumer.close()
        self._lookup.close()

    async def _handle(self, msg: Message) -> None:
        try:
            value = msg.value()
            if value is not None and len(value) > DEFAULT_MAX_EVENT_BYTES:
                raise EventTooLarge(f"record of {len(value)} bytes exceeds {DEFAULT_MAX_EVENT_BYTES}")
            event = await codec.decode_async(value)
        except codec.CodecError as exc:
            await self._dead_letter(msg, exc)
            return
        if not isinstance(event, ToolCallCleared):
            await self._dead_letter(msg, BadInput(f"unexpected {type(event).__name__} on chat.tools"))
            return
        await self._execute(event, msg.partition(), msg.offset())

    async def _execute(self, event: ToolCallCleared, partition: int, offset: int) -> None:
        """The call of the record at ``offset`` of ``partition``: looked up, started, run and finished."""
        call_id = event.call.id
        found: Found = await self._step(lambda: self._look_up(event))
        spec = await self._spec(event)
        ids_ = {"conversation_id": event.conversation_id, "call_id": call_id, "tool": event.call.name}
        if found.finished:
            log.info("a call already finished was skipped", extra=ids_)
            await self._step(lambda: self._transact([], partition, offset + 1))
            self._mine.pop(call_id, None)
            return
        mine = self._mine.get(call_id)
        if spec is None:  # the broker denies unknown tools; a file changed between the two is said so
            result = ToolResult("error", "", "the tool is no longer registered")
        elif mine is not None:
            result = mine  # run here already; only its finish failed
        elif found.started and call_id not in self._mine and not spec.idempotent:
            log.warning("a call started by an earlier owner ends unknown", extra=ids_)
            result = ToolResult("unknown", UNKNOWN, "started by an earlier owner; outcome unknown")
        else:
            if not found.started:
                started = ToolCallStarted(
                    event_id=event_id(call_id, "started"), conversation_id=event.conversation_id,
                    user_id=event.user_id, trace_id=event.trace_id, request_id=event.request_id,
                    call_id=call_id, name=event.call.name, executor=self._instance,
                )
                self._mine[call_id] = None  # a commit that only timed out may have happened: ours if seen later
                # Committed with the offset AT the record: a fenced member aborts here and never calls.
                await self._step(lambda: self._transact([started], partition, offset))
            result = await self._call(spec, event)
            self._mine[call_id] = result
        finished = ToolCallFinished(
            event_id=event_id(call_id, "finished"), conversation_id=event.conversation_id, user_id=event.user_id,
            trace_id=event.trace_id, request_id=event.request_id, call_id=call_id, name=event.call.name,
            outcome=result.outcome, result=result.text, error=result.error,
        )
        # A built-in's change (MemoryUpdated) commits with the finish or not at all.
        changes = list(result.events) if result.outcome == "ok" else []
        await self._step(lambda: self._transact([finished, *changes], partition, offset + 1))
        self._mine.pop(call_id, None)
        log.info("a tool call finished", extra={**ids_, "outcome": result.outcome})

    async def _dead_letter(self, msg: Message, error: Exception) -> None:
        """Bad input: to chat.tools.dlq, with the group's offset past it, in one transaction."""
        letter = dead_letter_for(
            topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), key=msg.key(), value=msg.value(),
            error=error, consumer=self._kafka.topic(GROUP),
        )
        record = (dlq_name(msg.topic()), letter.key, await codec.encode_async(letter))
        log.warning("dead-lettered a record", extra={"topic": msg.topic(), "offset": msg.offset(), "error_type": letter.error_type})
        await self._step(lambda: self._transact([], msg.partition(), msg.offset() + 1, [record]))

    async def _spec(self, event: ToolCallCleared) -> ToolSpec | None:
        """The operator's tool of the call's name, else the caller's organisation's (read at each call: a
        server its admin removed runs no more). A store that cannot be read abandons the record."""
        spec = self._config.tools.get(event.call.name)
        if spec is not None or self._org_specs is None or not event.org_id:
            return spec
        try:
            return await self._org_specs(event.org_id, event.call.name)
        except Exception as exc:
            raise Abandoned(type(exc).__name__) from exc

    async def _call(self, spec: ToolSpec, event: ToolCallCleared) -> ToolResult:
        try:
            if spec.guarded:  # an organisation's: its name may be another's too, and its server may change
                runner = runner_for(spec, self._config, self._factories)
            else:
                runner = self._runners.get(spec.name) or self._runners.setdefault(
                    spec.name, runner_for(spec, self._config, self._factories)
                )
        except NoRunner as exc:
            return ToolResult("error", "", str(exc))
        try:
            arguments = json.loads(event.call.arguments or "{}")
        except ValueError:  # the broker checked them against the schema: only a forged record gets here
            return ToolResult("error", "", "the arguments are not JSON")
        if not isinstance(arguments, dict):
            return ToolResult("error", "", "the arguments are not a JSON object")
        if spec.kind in tool_registry.USER_KINDS:
            running = runner.run_for(event.user_id, arguments, event.call.id)  # type: ignore[union-attr]
        else:
            running = runner.run(arguments, event.call.id)  # type: ignore[union-attr]
        try:
            return await asyncio.wait_for(running, spec.timeout_s + 5)
        except NotSent as exc:
            return ToolResult("error", "", f"the tool could not be reached ({exc})")
        except (OutcomeUnknown, asyncio.TimeoutError) as exc:
            return ToolResult("unknown", UNKNOWN, f"no answer from the tool ({type(exc).__name__})")
        except Exception as exc:
            if spec.kind not in tool_registry.USER_KINDS:
                raise
            # A built-in changes nothing but through the events it returns: whatever failed, nothing happened.
            return ToolResult("error", "", f"the tool failed ({type(exc).__name__})")

    async def _step(self, step: Any) -> Any:
        """``step`` in the Kafka thread; ``Abandoned`` if it fails (the record is then read again).

        A producer that failed for good is replaced once and the step tried again (a coordinator that
        aborted a timed-out transaction bumps the epoch, which librdkafka reports as fenced:
        workers/transactions.py): every transaction here also commits the group's offset with its
        generation, so a member that lost its partitions is refused there whatever its producer. Failed
        for good again within FENCE_WINDOW_S, another instance holds the transactional id, and this one
        stops. Any other failure is not retried here: the consumer must be polled to learn that the
        group moved on (a member that only retried would never rejoin)."""
        while True:
            try:
                return await self._blocking(step)
            except (BrokerUnavailable, KafkaException) as exc:
                if not _fatal(exc):
                    raise Abandoned(type(exc).__name__) from exc
                now = asyncio.get_running_loop().time()
                if self._replaced_at is not None and now - self._replaced_at < FENCE_WINDOW_S:
                    raise
                self._replaced_at = now
                log.warning("the transactional producer failed for good; replacing it", extra={"error_type": type(exc).__name__})
                await self._blocking(self._replace_producer)

    # ------------------------------------------------------------ Kafka thread

    def _look_up(self, event: ToolCallCleared) -> Found:
        partition = partition_for(event.conversation_id, self._partitions)
        since_ms = int(event.occurred_at / 1000 - CLOCK_SKEW_S * 1000)
        started = finished = False
        for msg in records_since(self._lookup, [TopicPartition(self._events_topic, partition, since_ms)], CALL_TIMEOUT_S):
            value = msg.value()
            if value is None or event.call.id.encode() not in value:  # the call id is never sealed
                continue
            try:
                seen = codec.decode(value)
            except codec.CodecError:
                continue
            if isinstance(seen, ToolCallStarted) and seen.call_id == event.call.id:
                started = True
            elif isinstance(seen, ToolCallFinished) and seen.call_id == event.call.id:
                finished = True
        self._lookup.unassign()
        return Found(started, finished)

    def _transact(
        self, events: list[Event], partition: int, position: int, raw: list[tuple[str, bytes, bytes]] | None = None
    ) -> None:
        """``events`` (and ``raw`` records: a dead letter) and the group's offset ``position`` of ``partition`` in
        one transaction, or neither. A step tried again after a commit that only timed out may commit its events
        twice: their ids are derived, so readers drop the copy."""
        p = self._producer
        if not self._initialised:
            p.init_transactions(CALL_TIMEOUT_S)
            self._initialised = True
        try:
            p.begin_transaction()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._STATE:
                raise
            self._commit(p)  # the last commit timed out and may be ending: end it first
            p.begin_transaction()
        try:
            for e in events:
                p.produce(self._kafka.topic(catalog.topic_name_for(e)), key=e.key, value=codec.encode(e))
            for topic, key, value in raw or ():
                p.produce(topic, key=key, value=value)
            p.send_offsets_to_transaction(
                [TopicPartition(self._tools_topic, partition, position)],
                self._consumer.consumer_group_metadata(),
                CALL_TIMEOUT_S,
            )
        except KafkaException as exc:
            if not exc.args[0].fatal():
                p.abort_transaction(CALL_TIMEOUT_S)
            raise
        self._commit(p)

    def _commit(self, p: Producer) -> None:
        """``commit_transaction``, asked again while it only times out (the coordinator may be completing it;
        an abort then would be refused): for at most four calls' time, then the step is tried again."""
        deadline = time.monotonic() + 4 * CALL_TIMEOUT_S
        while True:
            try:
                p.commit_transaction(CALL_TIMEOUT_S)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    p.abort_transaction(CALL_TIMEOUT_S)
                    raise
                if not err.retriable() or time.monotonic() > deadline:
                    raise


def _fatal(exc: Exception) -> bool:
    """Fenced (another member took over) or a producer that can never be used again."""
    if not isinstance(exc, KafkaException):
        return False
    err: KafkaError = exc.args[0]
    return err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m workers.tool_executor", description=__doc__.splitlines()[0])
    p.add_argument(
        "--instance",
        default=from_env(tool_registry.ToolSettings).executor_id or f"{socket.gethostname()}-{os.getpid()}",
        help="stable id of this executor (its transactional id): a restart with the same id aborts what it left open",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None, factories: Factories | None = None, org_specs: OrgSpecs | None = None) -> None:
    """``factories``: the runners of the built-ins over the users' data; ``org_specs``: the organisations' own
    tools (both streams/tool_executor.py's)."""
    args = parse_args(argv)
    setup_logging("tool-executor")
    keys.install_from_env()
    kafka = from_env(KafkaSettings)
    schema_registry.install(kafka)
    if metrics.serve_from_env("tool-executor") is not None:
        ops.register_lag(kafka, [kafka.topic(GROUP)])
    config = tool_registry.load(from_env(tool_registry.ToolSettings).tools_file)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Executor(kafka, config, args.instance, factories, org_specs).run(stop)

    asyncio.run(serve())


if __name__ == "__main__":
    main()
