"""The erasure job's Cassandra (streams/erasure.py): its progress rows, what a user holds, their refusal, and
each delete's rows written as the projections write them. The requester (gateway/erasure.py, ``parley users
erase``) uses it too, to refuse the user and record the request at once. Driver errors are
``StoreUnavailable`` (parley.cassandra.AsyncCql): the runner retries the job in place.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from cassandra.cluster import Session

from documents.status import VISIBLE
from parley import accounts
from parley.cassandra import AsyncCql
from parley.settings import CassandraSettings
from parley.users import revoke_key
from schemas import sealing
from schemas.events import ConversationDeleted, DocumentEvent, Event, MemoryUpdated
from streams.erasure import DocumentRef, Progress
from streams.projection import writes_for
from streams.search_index import SearchIndex
from streams.store import Store

#: Every column of ``erasures``, in the order of ``Progress``'s fields.
COLUMNS = (
    "user_id, requested_at, request_id, org_id, requested_by, conversations, documents, deletes_appended_at, key_destroyed_at, "
    "rows_purged_at, done_at"
)


def progress_of(r: object) -> Progress:
    """A row of ``erasures`` (anything with its columns) as the job's ``Progress``."""
    return Progress(
        r.user_id, r.request_id, r.requested_at, r.requested_by or "", r.org_id or "", r.conversations, r.documents,  # type: ignore[attr-defined]
        r.deletes_appended_at, r.key_destroyed_at, r.rows_purged_at, r.done_at,  # type: ignore[attr-defined]
    )  # fmt: skip


class ErasureRows(Store):
    """``cql``: share a session the process already has (the gateway's); else one is opened on first use."""

    def __init__(self, settings: CassandraSettings, cql: AsyncCql | None = None) -> None:
        super().__init__(settings, texts=False)  # the purge never reads a message's text
        if cql is not None:
            self._cql = cql

    async def progress(self, user_id: str, request_id: str) -> Progress | None:
        rows = await self.run(f"SELECT {COLUMNS} FROM {{ks}}.erasures WHERE user_id = ?", (user_id,))
        return next((progress_of(r) for r in rows if r.request_id == request_id), None)

    async def latest(self, user_id: str) -> Progress | None:
        """The user's newest erasure request, if any."""
        rows = await self.run(f"SELECT {COLUMNS} FROM {{ks}}.erasures WHERE user_id = ? LIMIT 1", (user_id,))
        return progress_of(rows[0]) if rows else None

    async def record(self, p: Progress) -> None:
        """What ``p`` knows, and nothing it does not: a null would erase a step that another writer (the job,
        when the requester records late) already recorded. Steps are never unset, so an upsert of the rest
        is all a record needs."""
        values = (
            p.user_id, p.requested_at, p.request_id, p.org_id, p.by, p.conversations, p.documents,
            p.deletes_appended_at, p.key_destroyed_at, p.rows_purged_at, p.done_at,
        )  # fmt: skip
        known = [(c, v) for c, v in zip(COLUMNS.split(", "), values) if v is not None]
        columns = ", ".join(c for c, _ in known)
        marks = ", ".join("?" for _ in known)
        await self.run(f"INSERT INTO {{ks}}.erasures ({columns}) VALUES ({marks})", tuple(v for _, v in known))

    async def refuse(self, user_id: str, at: datetime) -> list[str]:
        """The user marked erased (``at``: the request's time, the same on every run), every API key revoked,
        the sign-in account, OpenID links and web sessions removed; returns the keys' hashes (for a
        gateway's cache)."""
        await self.run(
            "UPDATE {ks}.users SET erased_at = ?, disabled = true, name = null WHERE user_id = ?", (at, user_id)
        )
        keys = await self.run("SELECT key_id, key_hash FROM {ks}.keys_by_user WHERE user_id = ?", (user_id,))
        for k in keys:
            for s in revoke_key(user_id, k.key_id, k.key_hash):
                await self.run(s.cql, s.params)
        session: Session = await self.session()
        await asyncio.to_thread(accounts.erase_accounts, session, user_id, keyspace=self._cql.settings.keyspace)
        return [k.key_hash for k in keys]

    async def holdings(self, user_id: str) -> tuple[list[str], list[DocumentRef]]:
        """The user's conversations and documents not yet marked deleted, archived ones too."""
        conversations = await self.run(
            "SELECT conversation_id, deleted FROM {ks}.conversations_by_user WHERE user_id = ?", (user_id,)
        )
        documents = await self.run(
            "SELECT document_id, conversation_id, status FROM {ks}.documents WHERE user_id = ?", (user_id,)
        )
        return (
            [str(r.conversation_id) for r in conversations if not r.deleted],
            [DocumentRef(str(d.document_id), str(d.conversation_id) if d.conversation_id else None) for d in documents if d.status in VISIBLE],
        )

    async def purge(self, event: Event) -> None:
        """The rows ``event`` (one of the job's deletes) projects to, as the materializer writes them."""
        if isinstance(event, ConversationDeleted):
            await self.write(writes_for(await self.load(event.conversation_id), event, sealing.sealer()))
        elif isinstance(event, DocumentEvent):
            await self.write_document(event)
        elif isinstance(event, MemoryUpdated):
            await self.write_memory(event)

    async def purge_search(self, user_id: str) -> None:
        """The user's search rows: a fixed set of partitions, found without their key (streams/search_index.py)."""
        await SearchIndex(self._cql).purge_user(user_id)
