"""Erasing a user: ``DELETE /v1/me`` and an admin's ``DELETE /v1/org/users/{id}`` (DESIGN.md §12), both on
the web session (the ``account`` and ``admin`` scopes: an API key erases nothing), and the operator's
``parley users erase USER`` (``erase_by_operator``), which also finishes an erasure that stopped half way.

Crypto-shredding. The log is forever and copied (archives, replay files), so
nothing there can be rewritten; but every copy of a user's content is sealed
under their data key. In order:

1. the user is marked erased (and so refused, within the auth cache's bound) and every key revoked;
2. each of their conversations and documents is deleted, and their memory emptied, by the same
   events a user's own deletes append, all in one append;
3. once the log has them, the data key is destroyed: whatever of theirs is still sealed anywhere
   (the log, an archive, a row not yet purged, a replay file) reads ``[erased]`` from then on;
4. the rows go from every read path (the projections blank or purge them from the log as well);
5. ``UserErased`` on ``user.erasures`` records it. Usage keeps its counts (no content).

Every step is a repeatable write, so an erasure that stopped (an outage, a restart) is finished by
running it again: ``parley users erase`` (the user, refused from step 1, cannot).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any

from gateway.directory import UserRow
from gateway.services import Services
from parley.settings import CassandraSettings, KafkaSettings
from parley.users import Statement
from schemas.events import ConversationDeleted, DocumentDeleted, MemoryUpdated, UserErased

log = logging.getLogger(__name__)


async def erase(svc: Services, user: UserRow, by: str, trace_id: str = "") -> dict[str, Any]:
    uid = user.user_id
    hashes = [k.key_hash for k in await svc.directory.keys(uid)]
    revoked = [Statement("UPDATE {ks}.api_keys SET revoked = true WHERE key_hash = ?", (h,)) for h in hashes]
    await svc.directory.apply(
        [
            Statement(
                "UPDATE {ks}.users SET erased_at = ?, disabled = true, name = null WHERE user_id = ?",
                (datetime.now(timezone.utc), uid),
            ),
            *revoked,
        ]
    )
    svc.auth.forget(uid, hashes)
    if svc.auth.sessions is not None:
        await svc.auth.sessions.erase(uid)  # the sign-in account, OpenID links and every web session
    conversations = await svc.store.conversation_ids_of(uid)
    documents = await svc.store.documents_of(uid)
    deletes: list[Any] = [ConversationDeleted(conversation_id=cid, user_id=uid, trace_id=trace_id) for cid in conversations]
    deletes += [
        DocumentDeleted(document_id=d.id, user_id=uid, conversation_id=d.conversation_id, trace_id=trace_id)
        for d in documents
    ]
    deletes.append(MemoryUpdated(user_id=uid, facts=[], trace_id=trace_id))
    await svc.append(*deletes)  # on the log: the projections will blank and purge from it whatever happens next
    await asyncio.to_thread(svc.keys.erase, uid)  # at once, not after the rows: the key is what the shred is
    for event in deletes:  # the read paths now rather than when the materializer gets there
        if isinstance(event, ConversationDeleted):
            await svc.store.write_through(event)
        elif isinstance(event, DocumentDeleted):
            await svc.write_document(event)
        else:
            await svc.store.write_memory(event)
    await svc.append(
        UserErased(
            user_id=uid, org_id=user.org_id, by=by, conversations=len(conversations), documents=len(documents),
            trace_id=trace_id,
        )
    )  # fmt: skip
    log.info("user erased", extra={"user_id": uid, "by": by, "conversations": len(conversations), "documents": len(documents)})
    return {"id": uid, "erased": True, "conversations": len(conversations), "documents": len(documents)}


async def erase_by_operator(kafka: KafkaSettings, cassandra: CassandraSettings, user_id: str) -> dict[str, Any]:
    """``parley users erase``: the same steps, on clients of the CLI's own (no gateway needed). A user whose
    erasure stopped half way (an outage, a restart) is erased again to the end: every step is a repeatable
    write. Gateways drop the user's keys and sessions within their caches' bounds, as for a revocation."""
    from gateway.auth import Authenticator
    from gateway.directory import Directory
    from gateway.session_store import SessionStore
    from gateway.sessions import WebSessions
    from gateway.settings import GatewaySettings, SessionSettings
    from gateway.store import Store
    from parley import keys
    from parley.cassandra import AsyncCql, connect
    from parley.kafka import EventProducer
    from parley.settings import from_env

    settings = from_env(GatewaySettings)
    session = await asyncio.to_thread(connect, cassandra)
    producer = EventProducer(kafka)
    try:
        key_service = await asyncio.to_thread(keys.install_from_env, session)
        cql = AsyncCql(cassandra, session)
        directory = Directory(cql)
        user = await directory.user(user_id)
        if user is None:
            raise ValueError(f"no such user: {user_id}")
        auth = Authenticator(directory, settings.auth_cache_s)
        auth.sessions = WebSessions(from_env(SessionSettings), SessionStore(cql))
        # Only the parts an erasure uses: no token streams or pool pressure (nothing is streamed or admitted).
        svc = Services(settings, Store(cql), producer, None, auth, session, None, directory=directory, keys=key_service)  # type: ignore[arg-type]
        return await erase(svc, user, "operator")
    finally:
        producer.close(5)
        session.cluster.shutdown()
