"""The erasure job: an ``ErasureRequested`` carried out to the end, whatever stops it on the way (DESIGN.md §12).

The requester (the gateway, ``parley users erase``) appends the request and refuses the user at once;
this core does the rest, in order, recording each step in ``erasures`` as it ends:

1. **requested**: the user refused again (marked erased, keys revoked, sign-in and sessions gone), in
   case the requester stopped between its append and its own refusal;
2. **deletes appended**: a ConversationDeleted per conversation, a DocumentDeleted per document and an
   empty MemoryUpdated, acknowledged by the log. From here the projections purge them whatever happens;
3. **key destroyed**: the crypto-shred. Whatever of theirs is sealed anywhere reads "[erased]";
4. **rows purged**: each delete's rows written now (the materializer and the document worker do the same
   from the log, later), and the user's search rows deleted (their fixed set of partitions);
5. **done**: ``UserErased`` on ``user.erasures``.

Every step is a repeatable write, and the deletes and ``UserErased`` have ids derived from the request,
so a redelivered request (a crash, a restart, Cassandra or Kafka away mid-job: the runner retries the
handler in place) finishes the job and appends nothing that changes anything. A step recorded done is
not run again. The runner acknowledges the request only when the handler returns, after step 5.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol

from parley.ids import NS
from schemas.events import ConversationDeleted, DocumentDeleted, ErasureRequested, Event, MemoryUpdated, UserErased
from streams.projection import to_time

#: The steps, in order; a job's status is the last one it finished.
STEPS = ("requested", "deletes_appended", "key_destroyed", "rows_purged", "done")


@dataclass(frozen=True)
class DocumentRef:
    document_id: str
    conversation_id: str | None  # the conversation it was uploaded to, if any


@dataclass(frozen=True)
class Progress:
    """One request's row of ``erasures``: when each step ended (None: not yet)."""

    user_id: str
    request_id: str  # the ErasureRequested's event id
    requested_at: datetime
    by: str
    org_id: str = ""
    conversations: int | None = None  # counted when the deletes were appended
    documents: int | None = None
    deletes_appended_at: datetime | None = None
    key_destroyed_at: datetime | None = None
    rows_purged_at: datetime | None = None
    done_at: datetime | None = None

    @classmethod
    def of(cls, request: ErasureRequested) -> Progress:
        return cls(request.user_id, request.event_id, to_time(request.occurred_at), request.by, request.org_id)

    @property
    def status(self) -> str:
        ended = (self.requested_at, self.deletes_appended_at, self.key_destroyed_at, self.rows_purged_at, self.done_at)
        return next((STEPS[i - 1] for i, at in enumerate(ended) if at is None), STEPS[-1])

    def public(self) -> dict[str, Any]:
        """What the requester's 202, the admin API and the CLI show: ids, counts and times, never content."""
        at = (self.requested_at, self.deletes_appended_at, self.key_destroyed_at, self.rows_purged_at, self.done_at)
        return {
            "request_id": self.request_id,
            "status": self.status,
            "by": self.by,
            "conversations": self.conversations,
            "documents": self.documents,
            "steps": {step: when.isoformat() if when else None for step, when in zip(STEPS, at)},
        }


def derived_id(request: ErasureRequested, what: str) -> str:
    """The id of an event the job appends for ``request``: the same on every run of it."""
    return str(uuid.uuid5(NS, f"erasure:{request.event_id}:{what}"))


def deletes_for(request: ErasureRequested, conversations: Sequence[str], documents: Sequence[DocumentRef]) -> list[Event]:
    """The events a user's own deletes append, for everything they hold, and their memory emptied (pure)."""
    uid, trace = request.user_id, request.trace_id
    out: list[Event] = [
        ConversationDeleted(event_id=derived_id(request, f"conversation:{c}"), conversation_id=c, user_id=uid, trace_id=trace)
        for c in conversations
    ]
    out += [
        DocumentDeleted(
            event_id=derived_id(request, f"document:{d.document_id}"), document_id=d.document_id, user_id=uid,
            conversation_id=d.conversation_id, trace_id=trace,
        )
        for d in documents
    ]  # fmt: skip
    out.append(MemoryUpdated(event_id=derived_id(request, "memory"), user_id=uid, facts=[], trace_id=trace))
    return out


def erased(request: ErasureRequested, progress: Progress) -> UserErased:
    return UserErased(
        event_id=derived_id(request, "erased"), user_id=request.user_id, org_id=request.org_id, by=request.by,
        conversations=progress.conversations or 0, documents=progress.documents or 0, trace_id=request.trace_id,
    )  # fmt: skip


class ErasureRows(Protocol):
    """The job's Cassandra (streams/erasure_rows.py)."""

    async def progress(self, user_id: str, request_id: str) -> Progress | None: ...

    async def record(self, progress: Progress) -> None: ...

    async def refuse(self, user_id: str, at: datetime) -> list[str]: ...

    async def holdings(self, user_id: str) -> tuple[list[str], list[DocumentRef]]: ...

    async def purge(self, event: Event) -> None: ...

    async def purge_search(self, user_id: str) -> None: ...


def _now() -> datetime:
    return datetime.now(timezone.utc)


class ErasureJob:
    """``handle`` is the processor's handler for ``user.erasures``: an ErasureRequested is carried out, a
    UserErased (the job's own last step, read back) needs nothing. ``append`` returns once the broker
    acknowledged every event; ``destroy_key`` destroys the user's data key (parley/keys.py ``erase``)."""

    def __init__(
        self,
        rows: ErasureRows,
        append: Callable[[Sequence[Event]], Awaitable[None]],
        destroy_key: Callable[[str], Awaitable[None]],
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._rows, self._append, self._destroy_key, self._clock = rows, append, destroy_key, clock

    async def handle(self, event: Event) -> list[Event]:
        if not isinstance(event, ErasureRequested):
            return []
        p = await self._rows.progress(event.user_id, event.event_id) or Progress.of(event)
        if p.done_at is not None:
            return []  # a redelivery of a finished job
        await self._rows.refuse(event.user_id, p.requested_at)
        await self._rows.record(p)  # the request is visible even when its requester could not write it
        conversations, documents = await self._rows.holdings(event.user_id)
        deletes = deletes_for(event, conversations, documents)
        if p.deletes_appended_at is None:
            # Counted here. A rerun of this step (stopped before its record) may count fewer: the projections may
            # have marked some deleted from the first run's append, which is on the log all the same.
            await self._append(deletes)
            p = await self._step(p, deletes_appended_at=self._clock(), conversations=len(conversations), documents=len(documents))
        if p.key_destroyed_at is None:
            await self._destroy_key(event.user_id)  # the log has the deletes: nothing of theirs needs the key now
            p = await self._step(p, key_destroyed_at=self._clock())
        if p.rows_purged_at is None:
            for delete in deletes:  # what a rerun lists is what was not purged yet
                await self._rows.purge(delete)
            await self._rows.purge_search(event.user_id)  # the search processor drops them too, per conversation
            p = await self._step(p, rows_purged_at=self._clock())
        await self._append([erased(event, p)])
        await self._step(p, done_at=self._clock())
        return []

    async def _step(self, p: Progress, **ended: Any) -> Progress:
        p = replace(p, **ended)
        await self._rows.record(p)
        return p
