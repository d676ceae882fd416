"""The document worker through a Cassandra outage: a deletion's purge waits for Cassandra instead of
ending the process (which would leave the deletion to the next owner, after a crash)."""

from __future__ import annotations

import asyncio

from documents.worker import DocumentWorker
from parley.consumer import Delivery
from parley.errors import StoreUnavailable
from schemas import events as ev

DOC = "4c0f7a52-1b7e-4f0a-9d8e-2a6b5c4d3e21"


class Index:
    def __init__(self, failures: int) -> None:
        self.failures, self.purged = failures, 0

    async def purge(self, document_id: str, user_id: str) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("Cassandra away")
        self.purged += 1


async def test_a_deletion_during_an_outage_is_purged_once_cassandra_answers() -> None:
    worker = object.__new__(DocumentWorker)
    worker.index = Index(failures=2)  # type: ignore[assignment]
    worker._delete_original = lambda document_id: None  # type: ignore[method-assign]
    deleted = ev.DocumentDeleted(document_id=DOC, user_id="u")
    delivery = Delivery(deleted, "documents.events", 0, 0, None)
    assert await worker._handle(delivery, asyncio.Event()) is True
    assert worker.index.purged == 1  # type: ignore[attr-defined]
