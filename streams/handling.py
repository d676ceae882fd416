"""One record of a processor's topic, from bytes to acknowledged: bad input to the DLQ, the rest retried in place.

The runner (``streams/app.py``) gives each record it reads to a ``RecordHandler``, in its key's lane
(``streams/lanes.py``). The record is decoded and given to its handler. What the handler produced is
sent, and the broker acknowledges each send. Only then is the record acknowledged, so that faust may
commit past it. Whatever raises on the way is one of three kinds (``kind_of``):

- **bad input**: the codec's errors (undecodable, unknown schema, invalid, oversize), a ``ValueError``
  (``parley.errors.BadInput``, an event's own checks), or an event type with no handler. Retrying
  cannot help, so the record goes to its topic's DLQ at once and the partition carries on.
- **transient**: ``parley.errors.Unavailable`` (broker, Cassandra, key service, classifier), a timeout,
  an ``OSError``, a Kafka error that says it is retriable, and whatever else the shell names (the
  Cassandra driver's errors). The same step is tried again, with pauses from 0.2 s doubling to 10 s,
  for as long as it takes. Meanwhile the record is neither skipped nor acknowledged, and the later
  records of its key wait behind it in its lane.
- **anything else**: a bug, or an outage that nobody translated. It is tried again the same way until
  the pauses add up to ``UNKNOWN_GIVE_UP_S``, then dead-lettered (``error_type`` ``handler_error``,
  the class name only) and counted in ``parley_processor_gave_up``. Retrying forever would stop the
  partition on a bug; dead-lettering at once would lose a turn to a passing fault.

Each step is retried alone: a handler that has returned is not run again because a send failed.
Retries are logged and counted by exception class, never with the error's text, which may quote a
message. A record stops being retried once its partition belongs to another consumer, because the
next owner reads it from the last commit.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from parley.errors import BadInput, Unavailable
from parley.logs import TRACE_ID
from parley.metrics import PROCESSOR_GAVE_UP, PROCESSOR_RETRIES
from schemas.codec import CodecError
from schemas.events import Event
from streams.wiring import Agent

log = logging.getLogger(__name__)

T = TypeVar("T")
Kind = Literal["bad_input", "transient", "unknown"]

FIRST_PAUSE_S = 0.2
MAX_PAUSE_S = 10.0
#: How long, in pauses, an error of no known kind is retried before its record is dead-lettered.
UNKNOWN_GIVE_UP_S = 30.0
#: Transient wherever they come from; the shell adds its clients' own (``Retry.transient``).
TRANSIENT: tuple[type[BaseException], ...] = (Unavailable, TimeoutError, OSError)


def kind_of(exc: BaseException, transient: tuple[type[BaseException], ...] = TRANSIENT) -> Kind:
    if isinstance(exc, (CodecError, ValueError)):
        return "bad_input"
    # aiokafka's errors say themselves whether trying again can help (KafkaError.retriable).
    if isinstance(exc, transient) or getattr(type(exc), "retriable", False) is True:
        return "transient"
    return "unknown"


class Rejected(Exception):
    """The record goes to the DLQ because of ``error``. ``gave_up`` means it was not bad input but outlasted its retries."""

    def __init__(self, error: BaseException, *, gave_up: bool = False) -> None:
        super().__init__(type(error).__name__)
        self.error = error
        self.gave_up = gave_up


class Revoked(Exception):
    """The record's partition went to another consumer while a step was being retried."""


@dataclass(frozen=True)
class Retry:
    """Runs one step of a record's handling until it returns, raising ``Rejected`` for what must be dead-lettered."""

    processor: str  # the metric's label
    transient: tuple[type[BaseException], ...] = TRANSIENT
    first_pause_s: float = FIRST_PAUSE_S
    max_pause_s: float = MAX_PAUSE_S
    give_up_s: float = UNKNOWN_GIVE_UP_S
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def __call__(
        self, what: str, step: Callable[[], Awaitable[T]], owned: Callable[[], bool], *, forever: bool = False
    ) -> T:
        """``step()``'s result. With ``forever`` every error is retried: a dead letter's send fails only for
        the broker's reasons, and it must not be skipped."""
        pause, unknown_s = self.first_pause_s, 0.0
        while True:
            try:
                return await step()
            except Exception as exc:
                kind: Kind = "transient" if forever else kind_of(exc, self.transient)
                if kind == "bad_input":
                    raise Rejected(exc) from exc
                if kind == "unknown" and unknown_s >= self.give_up_s:
                    PROCESSOR_GAVE_UP.labels(self.processor, type(exc).__name__).inc()
                    log.error(
                        f"{what} kept failing; the record is dead-lettered",
                        extra={"processor": self.processor, "error_type": type(exc).__name__, "where": _where(exc)},
                    )
                    raise Rejected(exc, gave_up=True) from exc
                if not owned():
                    raise Revoked() from exc
                PROCESSOR_RETRIES.labels(self.processor, type(exc).__name__).inc()
                log.warning(
                    f"{what} failed; retrying in place",
                    extra={
                        "processor": self.processor,
                        "error_type": type(exc).__name__,
                        "kind": kind,
                        "where": _where(exc),
                        "retry_in_s": pause,
                    },
                )
                await self.sleep(pause)
                if kind == "unknown":
                    unknown_s += pause
                pause = min(pause * 2, self.max_pause_s)


def _where(exc: BaseException) -> str:
    """The file and line that raised: enough to find a bug without logging the error's text."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


class Taken(Protocol):
    """A record as the runner took it: faust's event (``value`` is the raw bytes)."""

    value: bytes | None

    def ack(self) -> bool: ...


class RecordHandler:
    """Decode, dispatch, send and acknowledge one record; the lanes' ``handle``.

    ``decode``, ``send`` and ``dead_letter`` are the shell's (faust and the codec's size limit).
    ``owns`` says whether the record's partition is still this consumer's.
    """

    def __init__(
        self,
        agent: Agent,
        retry: Retry,
        *,
        decode: Callable[[Taken], Event | Awaitable[Event]],
        send: Callable[[Event], Awaitable[None]],
        dead_letter: Callable[[Taken, Rejected], Awaitable[None]],
        owns: Callable[[Taken], bool],
    ) -> None:
        self._agent, self._retry = agent, retry
        self._decode, self._send, self._dead_letter, self._owns = decode, send, dead_letter, owns

    async def __call__(self, record: Taken) -> None:
        def owned() -> bool:
            return self._owns(record)

        try:
            try:
                await self._handle(record, owned)
            except Rejected as rejected:
                await self._retry("dead-lettering a record", lambda: self._dead_letter(record, rejected), owned, forever=True)
        except Revoked:
            return  # not acknowledged: the partition's next owner reads it from the last commit
        record.ack()

    async def _handle(self, record: Taken, owned: Callable[[], bool]) -> None:
        async def decoded() -> Event:
            event = self._decode(record)
            return await event if inspect.isawaitable(event) else event  # the shell's decode fetches keys

        TRACE_ID.set("")
        event = await self._retry("decoding a record", decoded, owned)
        TRACE_ID.set(event.trace_id)  # this event's log lines carry its request's trace id
        handler = self._agent.handler_for(event)
        if handler is None:  # no business on this topic: not dropped silently
            raise Rejected(BadInput(f"unexpected {type(event).__name__}"))
        out: Sequence[Event] = await self._retry(f"handling a {type(event).__name__}", lambda: handler(event), owned)
        for produced in out:  # each send retried alone; the handler is not run again
            await self._retry(f"sending a {type(produced).__name__}", lambda p=produced: self._send(p), owned)  # type: ignore[misc]
