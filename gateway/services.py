"""What every handler shares: the process's clients, and the steps every write takes."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from gateway.auth import Authenticator, Principal
from gateway.errors import NotFound, ServiceUnavailable
from gateway.settings import GatewaySettings
from gateway.store import Conversation, Store
from gateway.tokens import TokenStreams
from parley.errors import Unavailable
from parley.kafka import EventProducer
from schemas.events import Event

log = logging.getLogger(__name__)


@dataclass
class Services:
    settings: GatewaySettings
    store: Store
    producer: EventProducer
    tokens: TokenStreams
    auth: Authenticator
    session: Any
    pressure: Any  # gateway.pressure.PoolPressure: refuse what the router would shed
    background: set[asyncio.Task] = field(default_factory=set)  # abandonment watches

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def append(self, *events: Event) -> None:
        """Append events (same key → same partition, in order) and wait for the broker's acknowledgement."""
        try:
            await asyncio.wait_for(
                asyncio.gather(*(self.producer.send(e) for e in events)), timeout=self.settings.append_timeout_s
            )
        except (Unavailable, asyncio.TimeoutError) as exc:
            log.warning("append failed", extra={"error": type(exc).__name__})
            raise ServiceUnavailable(
                "the event log is not accepting writes right now; retry shortly",
                code="log_unavailable",
                retry_after=self.settings.retry_after_s,
            ) from exc

    def admit_tier(self, tier: str) -> None:
        """503 + Retry-After now when the router would shed this turn anyway: nothing is appended."""
        shed = self.pressure.shed(tier)
        if shed is not None:
            raise ServiceUnavailable(
                "Parley is overloaded right now; retry after the indicated time",
                code="overloaded",
                retry_after=shed.retry_after_s,
            )

    async def owned(self, user: Principal, conversation_id: str) -> Conversation:
        conversation = await self.store.conversation(conversation_id)
        if conversation is None or conversation.user_id != user.user_id:
            raise NotFound("no such conversation")  # another user's conversation is indistinguishable from none
        return conversation


def services(request: Request) -> Services:
    return request.app.state.services


def trace_id(request: Request) -> str:
    return request.headers.get("x-request-id", "") or uuid.uuid4().hex
