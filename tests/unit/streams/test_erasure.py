"""The erasure job's core (streams/erasure.py) on in-memory rows: its steps in order, each recorded, and a job
stopped at any point finished by running it again without appending anything new."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from parley.errors import StoreUnavailable
from schemas.events import ConversationDeleted, DocumentDeleted, ErasureRequested, Event, MemoryUpdated, UserErased
from streams.erasure import STEPS, DocumentRef, ErasureJob, Progress, deletes_for

USER = "u_erased"


@dataclass
class World:
    """The user's rows, the log and the key, and every call in order; ``fail_at``: the call that raises once."""

    conversations: dict[str, bool] = field(default_factory=lambda: {"c1": False, "c2": False, "gone": True})  # id → deleted
    documents: list[DocumentRef] = field(default_factory=lambda: [DocumentRef("d1", "c1")])
    rows: dict[tuple[str, str], Progress] = field(default_factory=dict)
    log: list[Event] = field(default_factory=list)
    key_alive: bool = True
    calls: list[str] = field(default_factory=list)
    fail_at: str | None = None
    ticks: int = 0

    def _call(self, what: str) -> None:
        self.calls.append(what)
        if what == self.fail_at:
            self.fail_at = None
            raise StoreUnavailable(f"{what}: Cassandra away")

    # ErasureRows
    async def progress(self, user_id: str, request_id: str) -> Progress | None:
        self._call("progress")
        return self.rows.get((user_id, request_id))

    async def record(self, p: Progress) -> None:
        self._call(f"record {p.status}")
        self.rows[(p.user_id, p.request_id)] = p

    async def refuse(self, user_id: str, at: datetime) -> list[str]:
        self._call("refuse")
        return []

    async def holdings(self, user_id: str) -> tuple[list[str], list[DocumentRef]]:
        self._call("holdings")
        return [c for c, deleted in self.conversations.items() if not deleted], list(self.documents)

    async def purge(self, event: Event) -> None:
        self._call("purge")
        if isinstance(event, ConversationDeleted):
            self.conversations[event.conversation_id] = True
        elif isinstance(event, DocumentDeleted):
            self.documents = [d for d in self.documents if d.document_id != event.document_id]

    async def purge_search(self, user_id: str) -> None:
        self._call("purge search")

    # the job's other ports
    async def append(self, events: Sequence[Event]) -> None:
        self._call(f"append {type(events[-1]).__name__}")
        self.log.extend(events)

    async def destroy_key(self, user_id: str) -> None:
        self._call("destroy key")
        self.key_alive = False

    def clock(self) -> datetime:
        self.ticks += 1
        return datetime(2026, 12, 5, tzinfo=timezone.utc) + timedelta(seconds=self.ticks)

    def job(self) -> ErasureJob:
        return ErasureJob(self, self.append, self.destroy_key, self.clock)


def _request() -> ErasureRequested:
    return ErasureRequested(user_id=USER, org_id="o_1", by="admin", trace_id="t")


async def test_the_steps_run_in_order_each_recorded_and_the_key_goes_as_soon_as_the_deletes_are_on_the_log() -> None:
    world, request = World(), _request()
    assert await world.job().handle(request) == []  # the job appends itself, step by step
    assert world.calls == [
        "progress", "refuse", "record requested", "holdings",
        "append MemoryUpdated", "record deletes_appended",
        "destroy key", "record key_destroyed",  # before any row is written: the key is the shred
        "purge", "purge", "purge", "purge", "purge search", "record rows_purged",
        "append UserErased", "record done",
    ]  # fmt: skip
    deletes = world.log[:-1]
    assert {e.conversation_id for e in deletes if isinstance(e, ConversationDeleted)} == {"c1", "c2"}  # not the deleted one
    assert [(e.document_id, e.conversation_id) for e in deletes if isinstance(e, DocumentDeleted)] == [("d1", "c1")]
    assert [e.facts for e in deletes if isinstance(e, MemoryUpdated)] == [[]]
    done = world.log[-1]
    assert isinstance(done, UserErased) and (done.user_id, done.by, done.conversations, done.documents) == (USER, "admin", 2, 1)
    p = world.rows[(USER, request.event_id)]
    assert p.status == "done" and not world.key_alive
    assert list(p.public()["steps"]) == list(STEPS) and all(p.public()["steps"].values())


@pytest.mark.parametrize(
    "fail_at",
    ["refuse", "holdings", "append MemoryUpdated", "record deletes_appended", "destroy key", "record key_destroyed", "purge",
     "purge search", "append UserErased", "record done"],
)  # fmt: skip
async def test_a_job_stopped_at_any_step_is_finished_by_running_it_again_with_nothing_new_appended(fail_at: str) -> None:
    request = _request()
    clean = World()
    await clean.job().handle(request)
    world = World(fail_at=fail_at)
    with pytest.raises(StoreUnavailable):  # the runner retries it in place (streams/handling.py), or a restart redelivers it
        await world.job().handle(request)
    await world.job().handle(request)
    assert world.rows[(USER, request.event_id)].status == "done" and not world.key_alive
    assert all(world.conversations.values()) and not world.documents
    # A repeat appends the same events (ids derived from the request), so the log holds nothing the clean run's does not.
    assert {e.event_id for e in world.log} == {e.event_id for e in clean.log}
    assert world.calls.index("destroy key") > world.calls.index("record deletes_appended")
    erased = [e for e in world.log if isinstance(e, UserErased)]
    assert {(e.conversations, e.documents) for e in erased} == {(2, 1)}


async def test_a_finished_job_delivered_again_does_nothing_and_its_own_user_erased_needs_nothing() -> None:
    world, request = World(), _request()
    await world.job().handle(request)
    appended = len(world.log)
    world.calls.clear()
    await world.job().handle(request)
    assert world.calls == ["progress"] and len(world.log) == appended
    assert await world.job().handle(world.log[-1]) == [] and world.calls == ["progress"]


def test_each_request_derives_its_own_ids_and_the_same_ones_every_time() -> None:
    first, second = _request(), _request()
    docs = [DocumentRef("d1", None)]
    assert [e.event_id for e in deletes_for(first, ["c1"], docs)] == [e.event_id for e in deletes_for(first, ["c1"], docs)]
    assert not {e.event_id for e in deletes_for(first, ["c1"], docs)} & {e.event_id for e in deletes_for(second, ["c1"], docs)}


def test_the_status_is_the_last_step_ended() -> None:
    p = Progress.of(_request())
    assert p.status == "requested" and p.public()["steps"]["deletes_appended"] is None
    at = datetime(2026, 12, 5, tzinfo=timezone.utc)
    assert Progress(USER, "r", at, "self", deletes_appended_at=at, key_destroyed_at=at).status == "key_destroyed"
