"""A worker's closing events in Kafka transactions, fenced by its consumer-group generation (KIP-447).

The zombie this prevents: a worker that lost its partitions without knowing it
yet (paused, cut off from the broker while its session expired) still holds
finished generations. Another member took the partitions over, looked the
requests up (workers/recovery.py) and resumed them as the next attempt; when
the first worker wakes up, its buffered GenerationCompleted would land too,
and the log would hold two completions for one reply.

So the events that settle a request (GenerationCompleted on chat.events,
UsageRecorded on chat.usage) are written only inside a transaction that also
commits the worker's offsets of ``chat.inference.<pool>`` with its consumer's
group metadata (``send_offsets_to_transaction``):

* the group coordinator refuses that offset commit from a member whose
  generation is stale (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), the
  transaction is aborted, and nothing of it is ever read: every reader of
  chat.events and chat.usage is ``read_committed``;
* a new owner's consumer fetches its start offsets with ``require_stable``
  (librdkafka does in ``read_committed``), so while a transaction of the old
  owner with offsets of that partition is pending, the new owner does not
  start; whatever the old owner commits is on the log before the new owner
  reads the request and looks it up.

The group's offsets are committed only here, never by the consumer itself:
with every transaction, in an offsets-only one when partitions are revoked
or the worker closes, and a second after the last closing if the watermark
moved since. One transaction at a time; every closing waiting when one starts
goes into it. Token chunks stay outside (workers/sink.py): a transaction open
on a chat.tokens partition would hold back every live stream behind it.

Events are encoded (and sealed) before they join a batch, on the caller's
loop: an event that cannot be encoded fails its own caller, never a batch. A
closing whose records the broker or librdkafka refuses for good (too large,
say) is taken out of the batch and fails alone (``ClosingRefused``), the rest
go on; a batch aborted for any other reason is tried again whole.

All producer calls run on one thread of this module's own (they block).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from parley.errors import Fenced, ParleyError
from parley.kafka import producer_config
from parley.metrics import TRANSACTIONS
from parley.settings import KafkaSettings
from schemas import catalog, codec
from schemas.events import Event

log = logging.getLogger(__name__)

#: With nothing to close for this long, a moved watermark is committed on its own.
IDLE_COMMIT_S = 1.0
#: A transaction still in the producer after this many call timeouts is stuck (see _in_thread).
WEDGED_CALLS = 8
#: A second fencing this soon after the one a timed-out transaction explained is another instance's.
FENCE_WINDOW_S = 60.0
#: First pause before a batch whose transaction was aborted is tried again; doubles up to MAX_RETRY_S.
RETRY_S = 0.2
MAX_RETRY_S = 5.0


class GroupView(Protocol):
    """What the committer needs of the worker's group member (workers/intake.py)."""

    def positions(self) -> dict[int, int]:
        """Partition → commit position (first unfinished offset), for the partitions owned now."""
        ...

    def group_metadata(self) -> Any:
        """The consumer's ``consumer_group_metadata()`` (member id and generation), or None yet."""
        ...


class Aborted(Exception):
    """The transaction was aborted; nothing of it will ever be read. The batch may be tried again.
    ``cut_off``: it failed for want of a broker; the producer is replaced before the next try."""

    def __init__(self, reason: str, cut_off: bool = False) -> None:
        super().__init__(reason)
        self.cut_off = cut_off


class ClosingRefused(ParleyError):
    """This closing's records can never be written (librdkafka or the broker refused one for good:
    MSG_SIZE_TOO_LARGE, say). Retrying cannot help; the caller ends the turn another way."""


class _Refused(Aborted):
    """The transaction was aborted because the records of one closing were refused for good."""

    def __init__(self, closing: int, reason: str) -> None:
        super().__init__(reason)
        self.closing = closing  # its index in the batch


#: Errors that mean the broker was out of reach (down, restarting, a network partition).
_CUT_OFF = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT}

#: A record as the producer takes it: (topic, key, value).
Record = tuple[str, bytes | None, bytes]


@dataclass(eq=False)
class _Closing:
    records: tuple[Record, ...]
    done: asyncio.Future[None]


class TransactionalCommitter:
    def __init__(self, kafka: KafkaSettings, transactional_id: str, offsets_topic: str, timeout_ms: int) -> None:
        self._kafka = kafka
        self._offsets_topic = kafka.topic(offsets_topic)
        self._timeout_s = timeout_ms / 1000
        config = producer_config(
            kafka,
            **{
                # Stable per worker: a restarted worker aborts whatever its previous incarnation left open.
                "transactional.id": transactional_id,
                # How long a transaction left open (its worker died inside it) holds back readers of its
                # partitions before the coordinator aborts it; deliveries must fit inside it.
                "transaction.timeout.ms": timeout_ms,
                "delivery.timeout.ms": timeout_ms,
                "linger.ms": 0,  # flushed at once anyway: the batch is whatever waited for the last one
                # A transaction that starts while the coordinator still writes the previous one's markers
                # is told CONCURRENT_TRANSACTIONS and retried after this backoff, which grows up to the
                # max: librdkafka's 100 ms → 1 s made the median close of a reply ~0.5 s (bench.pipeline).
                "retry.backoff.ms": 5,
                "retry.backoff.max.ms": 50,
            },
        )
        self._config = config
        self._producer = Producer(config)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transactions")
        # Replaced producers, kept alive: a thread may still be inside one (freed with the process).
        self._wedged: list[tuple[Producer, ThreadPoolExecutor]] = []
        # Each blocking call's own bound; a whole transaction (and its abort) fits inside WEDGED_CALLS of them.
        self._call_s = min(3.0, self._timeout_s)
        self._group: GroupView | None = None
        self._pending: list[_Closing] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._committed: dict[int, int] = {}  # positions the last transaction committed (committer thread)
        self._fenced_at: list[float] = []  # when a timed-out transaction's fencing replaced the producer (_abort)

    # ------------------------------------------------------------ event-loop side

    async def start(self, group: GroupView) -> None:
        self._group = group
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._init)
        self._task = asyncio.create_task(self._run(), name="transactions")

    @property
    def task(self) -> asyncio.Task[None]:
        """Ends only by failing (Fenced): the worker watches it like its other loops."""
        assert self._task is not None
        return self._task

    async def commit(self, events: Sequence[Event]) -> None:
        """Write ``events`` in a fenced transaction; returns once committed, or raises ``ClosingRefused``
        when their records can never be written.

        Tried again (with fresh group metadata) after every other abort, for as long as the caller waits:
        a job whose partition is revoked or lost is cancelled (Scheduler.abandon), and what it
        waited to write is then left out of the next transaction.
        """
        # Encoded here, on the caller's loop: an event that cannot be (InvalidEvent, or its key away:
        # StoreUnavailable) fails this caller, not the batch it would have joined.
        records = tuple([(self._kafka.topic(catalog.topic_name_for(e)), e.key, await codec.encode_async(e)) for e in events])
        closing = _Closing(records, asyncio.get_running_loop().create_future())
        self._pending.append(closing)
        self._wake.set()
        await closing.done  # a cancelled caller cancels it: the next batch leaves it out

    def commit_offsets(self) -> None:
        """An offsets-only transaction now, from the intake thread (revocation, close); waits for it."""
        try:
            self._executor.submit(self._transact, ()).result(timeout=WEDGED_CALLS * self._call_s)
        except Exception as exc:  # the next owner redelivers from the last committed position: looked up, not lost
            log.warning("offsets not committed", extra={"error": repr(exc)})

    async def close(self) -> None:
        """Stop batching. Nothing is left to flush (every write is inside a transaction that either
        committed or will be aborted), so a committer thread still waiting on an absent broker is
        not waited for."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        delay = RETRY_S
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), IDLE_COMMIT_S)
            except TimeoutError:
                pass
            self._wake.clear()
            batch = [c for c in self._pending if not c.done.done()]  # cancelled: its partition went elsewhere
            self._pending.clear()
            try:
                await self._in_thread(tuple(c.records for c in batch))
            except _Refused as exc:
                TRANSACTIONS.labels("aborted").inc()
                refused = batch.pop(exc.closing)
                log.error("a closing's records were refused; failing it alone", extra={"closings": len(batch) + 1, "error": str(exc)})
                if not refused.done.done():
                    refused.done.set_exception(ClosingRefused(str(exc)))
                self._pending[:0] = batch  # the others go on at once
                self._wake.set()
                continue
            except Aborted as exc:
                TRANSACTIONS.labels("aborted").inc()
                log.warning(
                    "transaction aborted; trying again",
                    extra={"closings": len(batch), "error": str(exc), "retry_in_s": delay},
                )
                if exc.cut_off:
                    # After a broker restart librdkafka's cached coordinators can leave the next
                    # send_offsets_to_transaction blocked for good (see _in_thread): start afresh.
                    await self._replace()
                self._pending[:0] = batch
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_S)
                self._wake.set()
                continue
            except Fenced as exc:
                log.error(
                    "the transactional producer failed for good (fenced: is another worker running with this"
                    " PARLEY_WORKER_ID?); stopping",
                    extra={"error": str(exc)},
                )
                for c in batch + self._pending:
                    if not c.done.done():
                        c.done.set_exception(exc)
                raise
            delay = RETRY_S
            for c in batch:
                if not c.done.done():
                    c.done.set_result(None)

    async def _in_thread(self, closings: tuple[tuple[Record, ...], ...]) -> None:
        """``_transact`` on the committer thread, with a watchdog.

        librdkafka's ``send_offsets_to_transaction`` can block past its timeout, for good, when
        its cached group coordinator went away (a broker restart: librdkafka issues #5456, #5511;
        seen here in tests/e2e/test_outages.py). A producer stuck that long is replaced by a new
        one with the same transactional id, whose ``init_transactions`` aborts what the stuck
        one had open and fences it; the batch is then tried again.
        """
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self._executor, self._transact, closings)
        work.add_done_callback(lambda f: f.cancelled() or f.exception())  # a stuck call's late end: seen, dropped
        try:
            await asyncio.wait_for(asyncio.shield(work), WEDGED_CALLS * self._call_s)
        except TimeoutError:
            log.error("the transactional producer is stuck in a call; replacing it", extra={"after_s": WEDGED_CALLS * self._call_s})
            await self._replace()
            raise Aborted("the stuck producer was replaced") from None

    async def _replace(self) -> None:
        """A new producer with the same transactional id: its init aborts and fences the old one."""
        self._wedged.append((self._producer, self._executor))  # a call may still run on it
        TRANSACTIONS.labels("replaced").inc()
        self._executor.shutdown(wait=False)
        self._producer = Producer(self._config)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transactions")
        self._committed = {}
        await asyncio.get_running_loop().run_in_executor(self._executor, self._init)

    # ------------------------------------------------------------ committer thread

    def _init(self) -> None:
        """``init_transactions``, for as long as the broker is away (nothing can commit meanwhile)."""
        while True:
            try:
                self._producer.init_transactions(self._timeout_s)
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.fatal() or not err.retriable():
                    raise Fenced(f"init_transactions failed: {err.name()}") from exc
                log.warning("transactions not initialised yet; retrying", extra={"error": err.name()})

    def _transact(self, closings: tuple[tuple[Record, ...], ...]) -> None:
        """One transaction: the closings' records and the owned partitions' positions, or nothing at all."""
        assert self._group is not None
        positions = self._group.positions()
        if not closings and (not positions or positions == self._committed):
            return
        if not positions:
            raise Aborted("no partition is owned: nothing to fence the transaction with")
        offsets = [TopicPartition(self._offsets_topic, part, pos) for part, pos in sorted(positions.items())]
        metadata = self._group.group_metadata()
        if metadata is None:
            raise Aborted("the group member has not polled yet")
        p = self._producer
        failed: list[tuple[int, KafkaError]] = []  # (closing, error) of records whose delivery failed
        committing = False  # from here on the transaction may be committed whatever this process sees
        try:
            p.begin_transaction()
            for i, records in enumerate(closings):
                for record in records:
                    self._produce(p, i, record, failed)
            # Flushed first: left to commit_transaction, the commit waited ~100 ms for the batch's records.
            if p.flush(self._call_s) > 0:
                raise Aborted("records of the transaction were not delivered in time", cut_off=True)
            refused = next(((i, err) for i, err in failed if _for_good(err)), None)
            if refused is not None:
                raise _Refused(refused[0], f"delivery refused: {refused[1].name()}")
            self._retrying(lambda: p.send_offsets_to_transaction(offsets, metadata, self._call_s))
            committing = True
            # Until it ends: a commit that timed out may be completing at the coordinator already, which
            # then refuses an abort (INVALID_TXN_STATE, fatal: the worker would stop as fenced). A
            # producer stuck that long is replaced by the watchdog (WEDGED_CALLS).
            self._retrying(lambda: p.commit_transaction(self._call_s), until_done=True)
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal():
                if committing or err.code() in _FENCED:
                    raise Fenced(err.name()) from exc
                raise _unusable(err) from exc
            self._abort(p, timed_out=err.code() in _CUT_OFF)
            raise Aborted(err.name(), cut_off=err.code() in _CUT_OFF) from exc
        except Aborted as exc:
            self._abort(p, timed_out=exc.cut_off)
            raise
        TRANSACTIONS.labels("committed").inc()
        self._committed = positions

    def _produce(self, p: Producer, closing: int, record: Record, failed: list[tuple[int, KafkaError]]) -> None:
        topic, key, value = record

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failed.append((closing, err))

        while True:
            try:
                p.produce(topic, value=value, key=key, on_delivery=delivered)
                return
            except BufferError:
                p.poll(0.1)
            except KafkaException as exc:
                if _for_good(exc.args[0]):  # refused before it was queued: MSG_SIZE_TOO_LARGE, say
                    raise _Refused(closing, f"produce refused: {exc.args[0].name()}") from exc
                raise

    def _retrying(self, call: Any, *, until_done: bool = False) -> None:
        """A transactional call, again while its error is retriable and needs no abort: for one call's
        time, or (``until_done``) for as long as that holds."""
        deadline = time.monotonic() + self._call_s
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or err.txn_requires_abort() or (not until_done and time.monotonic() > deadline):
                    raise
                time.sleep(0.1)

    def _abort(self, p: Producer, *, timed_out: bool = False) -> None:
        """Abort the open transaction; a retriable failure (broker away) is tried again for a while.
        One still open after that is aborted by the next transaction's attempt (begin fails first).

        ``timed_out``: the transaction failed for want of a broker. By the time the abort reaches a
        coordinator again it may have aborted the transaction itself (past transaction.timeout.ms) and
        bumped the producer's epoch, which librdkafka reports as fenced, exactly as a newer instance
        would be (bench.chaos, seed 51: a broker killed mid-transaction stopped a worker). Nothing was
        committed, and the group's generation still fences every offset commit (KIP-447), so the producer
        is replaced and the batch tried again; fenced again within FENCE_WINDOW_S, it is a twin: stop."""
        deadline = time.monotonic() + 2 * self._call_s
        while True:
            try:
                p.abort_transaction(self._call_s)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    if err.code() in _FENCED:
                        now = time.monotonic()
                        if timed_out and all(now - at > FENCE_WINDOW_S for at in self._fenced_at):
                            self._fenced_at.append(now)
                            log.warning("the coordinator ended a timed-out transaction; replacing the producer", extra={"error": err.name()})
                            raise Aborted(f"{err.name()} after a timed-out transaction: the producer is replaced", cut_off=True) from exc
                        raise Fenced(err.name()) from exc
                    raise _unusable(err) from exc
                if not err.retriable():
                    if err.code() == KafkaError._STATE:  # nothing open to abort
                        return
                    raise Fenced(f"abort failed: {err.name()}") from exc
                if time.monotonic() > deadline:
                    raise Aborted(f"abort still pending: {err.name()}", cut_off=True) from exc
                time.sleep(0.2)


#: A record's own refusal, which no retry can mend (not the broker away, not the transaction's state).
_REFUSED = {
    KafkaError.MSG_SIZE_TOO_LARGE,  # over message.max.bytes: librdkafka's, or the topic's max.message.bytes
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_RECORD,
}


#: Fatal errors that mean another producer holds this transactional id (a zombie or a misconfigured
#: twin): this one must stop. Any other fatal error (INVALID_TXN_STATE after a coordinator moved
#: while a broker hung, say) leaves only this producer unusable.
_FENCED = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


def _unusable(err: KafkaError) -> Aborted:
    """A fatal error before the commit was asked for: the transaction was never committed, so it is
    dropped with its producer, which a new one with the same id replaces (its init aborts what was
    open); the batch is tried again. (Seen in bench.chaos --replicas 3: AddOffsetsToTxn timed out while
    the coordinator's broker was paused, and the abort was refused, INVALID_TXN_STATE, fatal; the
    worker stopped as if fenced.)"""
    return Aborted(f"{err.name()} before the commit: the producer is replaced", cut_off=True)


def _for_good(err: KafkaError) -> bool:
    return err.code() in _REFUSED
