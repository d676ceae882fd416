"""What runs one call of a Parley tool: the interface every kind of tool meets, and the HTTP kind.

The executor (workers/tool_executor.py) decides whether a call may run at all and records that it started
before it goes out; a runner only carries it out once and says how it went. Each call carries its id as the
idempotency key: a tool that honours it (the operator declares ``idempotent``) takes effect once however
often it is asked, which is what lets a new owner of a call ask again instead of giving up.

A runner raises ``NotSent`` only when it knows the request never left (the connection was refused): nothing
can have happened. Any other failure after the request may have left (a timeout, a reset) raises
``OutcomeUnknown``: the tool may or may not have acted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from parley.tool_registry import ToolSpec
from schemas.events import Event

#: The most of a tool's answer kept (characters); the rest is cut and the result says so.
MAX_RESULT_CHARS = 20_000


@dataclass(frozen=True)
class ToolResult:
    outcome: str  # ok | error (the tool answered, and said it failed)
    text: str  # what the tool returned: untrusted data, never an instruction
    error: str = ""  # why not ok, in words that never quote the tool's output
    # What the call changes in Parley's own log (a built-in's MemoryUpdated): committed in the transaction of
    # its ToolCallFinished and only there, so the change happens exactly when the call is seen finished.
    events: tuple[Event, ...] = ()


class NotSent(Exception):
    """The request never reached the tool: nothing happened."""


class OutcomeUnknown(Exception):
    """The request may have reached the tool, and no answer came back."""


class Runner(Protocol):
    async def run(self, arguments: dict[str, Any], idempotency_key: str) -> ToolResult: ...


class UserRunner(Protocol):
    """A built-in acting on the calling user's own data (tool_registry.USER_KINDS): handed their id, which the
    cleared call carries (the broker took it from the turn, never from the model)."""

    async def run_for(self, user_id: str, arguments: dict[str, Any], idempotency_key: str) -> ToolResult: ...


def clipped(text: str) -> str:
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "\n[cut: the tool's answer was longer]"


class HttpTool:
    """An operator's HTTP tool: ``POST url`` with the arguments as a JSON body and the call id in
    ``Idempotency-Key`` (the IETF draft's header, as Stripe and others take it). 2xx: ok, the body is the
    result; 4xx/5xx: error, the status named. Redirects are not followed: the operator's URL is the tool."""

    def __init__(self, spec: ToolSpec, client: httpx.AsyncClient | None = None) -> None:
        self._spec = spec
        self._client = client or httpx.AsyncClient(timeout=spec.timeout_s, follow_redirects=False)

    async def run(self, arguments: dict[str, Any], idempotency_key: str) -> ToolResult:
        try:
            response = await self._client.post(
                self._spec.url,
                content=json.dumps(arguments),
                headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
                timeout=self._spec.timeout_s,
            )
        except httpx.ConnectError as exc:  # refused or unresolvable: nothing was sent
            raise NotSent(type(exc).__name__) from exc
        except httpx.HTTPError as exc:
            raise OutcomeUnknown(type(exc).__name__) from exc
        if response.is_success:
            return ToolResult("ok", clipped(response.text))
        return ToolResult("error", clipped(response.text), f"the tool answered HTTP {response.status_code}")

    async def aclose(self) -> None:
        await self._client.aclose()
