"""What the router decided for each (request, attempt), and since when it knows every decision it owes.

One attempt of a turn can reach the router more than once: faust redelivers
what a killed router had not committed, and the context builder sends a turn
again after its own restart (at-least-once). The second record must get the
first one's decision. Routed elsewhere, two workers would each generate the
attempt — both legitimate owners of their partitions, so no fencing helps —
and the reply would be answered twice. A shed turn shed again, not run.

Within one life the router remembers its decisions. What it cannot remember
(it restarted, or another router held a partition for a while) is on the log:
a routed turn is an InferenceRouted on ``chat.inference.<pool>``, a shed one a
``rejected`` GenerationCompleted on ``chat.events`` — the effect is the
record, so nothing is written twice on the hot path. This module keeps, for
every ``chat.inference`` partition it owns, a *horizon*: the memory holds the
decision for every request asked for (``requested_at``) since then. A request
older than its partition's horizon may have been decided by someone else, so
``recall_from`` says from when the log must be read back; the shell reads it
(``streams.route_recall``) and hands what it found to ``recalled``, which
lowers the horizon of every owned partition to that time.

A partition's horizon starts at its assignment, so the first request asked for
before it costs one read; later ones are newer. Every comparison allows
``SKEW_S`` of clock skew between the gateway (``requested_at``) and the
router (record timestamps). Forgetting (the memory is bounded) raises the
horizon past the newest decision forgotten.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from parley.lru import LRU
from parley.partitioning import partition_for
from schemas.events import Event, InferenceRequested

#: Clock skew allowed between the gateway (which stamps ``requested_at``) and the router (record timestamps).
SKEW_S = 5.0


def requested_at_s(request: InferenceRequested) -> float:
    """When the turn was asked for, in seconds; a request from a writer older than the field falls back
    to when it was built (a re-emission's is later than its first decision: recall may then miss it)."""
    return (request.requested_at or request.occurred_at) / 1e6


def attempt_key(request_id: str, attempt: int) -> str:
    return f"{request_id}:{attempt}"


@dataclass(frozen=True)
class Decided:
    """A decision: the events it produced (an InferenceRouted without its prompt, or a turn's ending)."""

    outs: tuple[Event, ...]
    at: float  # when it was taken (wall clock, s): by this router, or the timestamp of the record recalled


class RouteMemory:
    def __init__(self, capacity: int, partitions: int) -> None:
        self._decided: LRU[str, Decided] = LRU(capacity)
        self._partitions = partitions  # of chat.inference: whose partition a request came from
        self._horizon: dict[int, float] = {}
        self._forgotten_at = -math.inf  # the newest decision forgotten to make room

    def assigned(self, partitions: Iterable[int], now: float) -> None:
        # Until now another router may have decided for them; it may also run ahead of our clock.
        for p in partitions:
            self._horizon[p] = now + SKEW_S

    def revoked(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self._horizon.pop(p, None)

    def decision(self, request: InferenceRequested) -> Decided | None:
        return self._decided.get(attempt_key(request.request_id, request.attempt))

    def recall_from(self, request: InferenceRequested) -> float | None:
        """The time (wall clock, s) from which the log must be read before ``request`` is decided; None when
        the memory answers. A partition never assigned (no rebalance seen) is treated as just assigned."""
        if self.decision(request) is not None:
            return None
        horizon = self._horizon.get(partition_for(request.conversation_id, self._partitions), math.inf)
        asked = requested_at_s(request)
        if asked >= max(horizon, self._forgotten_at + SKEW_S):
            return None
        return asked - SKEW_S

    def recalled(self, since: float, found: Iterable[tuple[str, Decided]]) -> None:
        """What the log holds from ``since`` on: decisions taken first are kept, and every owned partition's
        memory now reaches back to requests asked for at ``since + SKEW_S``."""
        for key, decided in found:
            if key not in self._decided:
                self._remember(key, decided)
        for p, horizon in self._horizon.items():
            self._horizon[p] = min(horizon, since + SKEW_S)

    def decided(self, request: InferenceRequested, outs: Iterable[Event], now: float) -> None:
        self._remember(attempt_key(request.request_id, request.attempt), Decided(tuple(outs), now))

    def _remember(self, key: str, decided: Decided) -> None:
        for _, old in self._decided.put(key, decided):
            self._forgotten_at = max(self._forgotten_at, old.at)
