"""Engine request priorities: interactive turns above document turns above background writing.

SGLang launched with ``--enable-priority-scheduling`` takes waiting requests
higher ``priority`` first (``--schedule-low-priority-values-first`` unset), and
may preempt lower ones; an engine launched without it ignores the field. The
bands keep the seeds' rule (a long document job must not hold up a short
question) and, inside a band, paid tiers go first, as admission does.
"""

from __future__ import annotations

from schemas.events import InferenceRequested

#: Titles and summaries: nobody waits on them.
BACKGROUND = 0
#: Turns that carry a document search: long prompts, prefill-heavy.
DOCUMENT = 10
#: Everything a person is watching stream.
INTERACTIVE = 20
#: Moderation checks hold a reply back until they answer.
GUARD = 30

_TIER = {"free": 0, "plus": 1, "enterprise": 2}


def of_turn(request: InferenceRequested) -> int:
    band = DOCUMENT if request.retrieval is not None else INTERACTIVE
    return band + _TIER.get(request.tier, 0)
