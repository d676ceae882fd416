"""Requesting a user's erasure: ``DELETE /v1/me`` and an admin's ``DELETE /v1/org/users/{id}`` (DESIGN.md §12), both
on the web session (the ``account`` and ``admin`` scopes: an API key erases nothing), and the operator's
``parley users erase USER`` (``request_by_operator``).

Crypto-shredding: the log is forever and copied (archives, replay files), so nothing there can be
rewritten; but every copy of a user's content is sealed under their data key, which the erasure
destroys. A request here does two things and answers 202:

1. ``ErasureRequested`` on ``user.erasures``, acknowledged: from then on the erasure processor
   (streams/erasure.py) carries it out to the end, whatever stops on the way. A 503 before it means
   nothing was done: ask again;
2. the user refused at once: marked erased, every key revoked, sign-in and sessions gone, and this
   gateway's caches of them dropped (other gateways within their caches' bounds). The job does it
   again, so a 503 here still ends with the user erased.

Its progress is the ``erasures`` row the 202 shows, then ``GET /v1/org/users/{id}/erasure`` (the
organisation's admins) and ``parley users erase`` (the operator). The user who erased themselves can no
longer sign in, so the 202 is the last they hear.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.directory import UserRow
from gateway.services import Services
from parley.settings import CassandraSettings, KafkaSettings
from schemas.events import ErasureRequested
from streams.erasure import Progress
from streams.erasure_rows import ErasureRows

log = logging.getLogger(__name__)


async def request(svc: Services, user: UserRow, by: str, trace_id: str = "") -> dict[str, Any]:
    """Append the request, refuse the user, record it; the erasure as ``GET …/erasure`` shows it."""
    uid = user.user_id
    requested = ErasureRequested(user_id=uid, org_id=user.org_id, by=by, trace_id=trace_id)
    await svc.append(requested)  # first: once it is on the log the erasure happens, whatever fails next
    progress = Progress.of(requested)
    rows: ErasureRows = svc.erasures
    hashes = await rows.refuse(uid, progress.requested_at)
    svc.auth.forget(uid, hashes)
    if svc.auth.sessions is not None:
        await svc.auth.sessions.erase(uid)  # signed out here at once (the rows went with refuse)
    await rows.record(progress)
    log.info("erasure requested", extra={"user_id": uid, "by": by, "request_id": requested.event_id})
    return {"id": uid, "erasure": progress.public()}


async def status(svc: Services, user_id: str) -> dict[str, Any]:
    """The user's newest erasure (None: never requested)."""
    latest = await svc.erasures.latest(user_id)
    return {"id": user_id, "erasure": latest.public() if latest else None}


async def request_by_operator(kafka: KafkaSettings, cassandra: CassandraSettings, user_id: str) -> dict[str, Any]:
    """``parley users erase``: the same request, on clients of the CLI's own (no gateway needed). A user erased
    before may be asked for again: the job repeats every step, harmlessly. Gateways drop the user's keys
    and sessions within their caches' bounds, as for a revocation."""
    from gateway.auth import Authenticator
    from gateway.directory import Directory
    from gateway.settings import GatewaySettings
    from parley.cassandra import AsyncCql, connect
    from parley.kafka import EventProducer
    from parley.settings import from_env

    settings = from_env(GatewaySettings)
    session = await asyncio.to_thread(connect, cassandra)
    producer = EventProducer(kafka)
    try:
        cql = AsyncCql(cassandra, session)
        directory = Directory(cql)
        user = await directory.user(user_id)
        if user is None:
            raise ValueError(f"no such user: {user_id}")
        # Only the parts a request uses: no store, token streams or pool pressure.
        svc = Services(settings, None, producer, None, Authenticator(directory, settings.auth_cache_s), session, None)  # type: ignore[arg-type]
        svc.erasures = ErasureRows(cassandra, cql)
        return await request(svc, user, "operator")
    finally:
        producer.close(5)
        session.cluster.shutdown()


async def status_by_operator(cassandra: CassandraSettings, user_id: str) -> dict[str, Any]:
    """``parley users erasure USER``: the newest erasure of the user, read with the CLI's own client."""
    rows = ErasureRows(cassandra)
    try:
        latest = await rows.latest(user_id)
        return {"id": user_id, "erasure": latest.public() if latest else None}
    finally:
        rows.close()
