"""What a processor asks of the runner, without faust: the shape every processor has.

A processor is a core (a plain class: state and ``handle(event) -> events``)
wired by a function of its settings into a ``Wiring``: which topics it reads
in its consumer group and which handler takes each event type there, plus the
background tasks, timers and rebalance hooks it needs. ``streams.app.wired_app``
executes any wiring the same way: decode, dispatch, dead-letter, produce with
the broker's acknowledgement, and let faust commit. ``streams.processors``
names the processors, one row each.

Dispatch is by event type, the most specific class first (a handler for
``Event`` takes everything). An event type with no handler, or a handler that
raises ``ValueError`` (``parley.errors.BadInput``: an id that is not a UUID, a
record no row can hold), sends the record to its topic's DLQ; the partition
carries on. Any other error is retried in place (streams/handling.py): a
handler need not retry an outage itself, and may be called again with the same
event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from schemas.events import Event

#: A handler: the events to produce for one event (each to its catalog topic; an InferenceRouted to its partition).
Handler = Callable[[Event], Awaitable[Sequence[Event]]]
#: Told the partitions of one of the processor's topics that were assigned or revoked.
RebalanceHook = Callable[[str, set[int]], Awaitable[None]]


@dataclass(frozen=True)
class Agent:
    topic: str  # catalog name, read in the processor's group
    handlers: Mapping[type[Event], Handler]

    def handler_for(self, event: Event) -> Handler | None:
        return next((self.handlers[c] for c in type(event).__mro__ if c in self.handlers), None)


@dataclass(frozen=True)
class Timer:
    interval_s: float
    run: Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Wiring:
    agents: Sequence[Agent]
    writes: tuple[str, ...] = ()  # catalog topics its handlers produce to
    tasks: Sequence[Callable[[], Awaitable[None]]] = ()  # run beside the agents for the process's life
    timers: Sequence[Timer] = ()
    on_assigned: Sequence[RebalanceHook] = ()
    on_revoked: Sequence[RebalanceHook] = ()
    on_stop: Sequence[Callable[[], Awaitable[None]]] = ()
    #: How long the broker may hold a fetch of this processor's consumer to fill it (fetch.max.wait,
    #: with a 64 KiB fetch.min.bytes); 0 returns each fetch as soon as a record is there. Off the
    #: reply's path a wait turns a fetch per record into a fetch per batch (the materializer's cost).
    fetch_wait_ms: int = 0

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(a.topic for a in self.agents)


def returning_nothing(handle: Callable[[Event], Awaitable[object]]) -> Handler:
    """A handler for a core whose ``handle`` writes somewhere else (Cassandra) and produces no events."""

    async def handler(event: Event) -> Sequence[Event]:
        await handle(event)
        return ()

    return handler
