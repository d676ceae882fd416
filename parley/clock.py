"""Wall clocks across services: the skew Parley allows between them, and when a turn was asked for.

Decisions about "could someone else have handled this before me?" compare one
service's clock with another's: the gateway stamps ``requested_at``, the
router and the workers compare it with their own time. Each comparison gives
``SKEW_S`` away, on the side of looking something up needlessly.
"""

from __future__ import annotations

from schemas.events import InferenceRequested

#: Clock skew allowed between the services' wall clocks (NTP keeps it far lower).
SKEW_S = 5.0


def requested_at_s(request: InferenceRequested) -> float:
    """When the turn was asked for, in seconds; a request from a writer older than the field falls back
    to when it was built (a re-emission's is later than its first handling: a lookup may then miss it)."""
    return (request.requested_at or request.occurred_at) / 1e6
