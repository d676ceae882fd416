"""A small Python client of Parley's HTTP API (used by `parley chat`, the e2e tests and bench/).

SSE is parsed here rather than with a library so the exact wire format is what
gets tested: ``id:``, ``event:``, ``data:`` lines, a blank line ends an event,
``:`` lines are keep-alive comments.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: dict[str, Any]
    id: str | None = None


@dataclass
class Reply:
    """What one streamed reply amounted to."""

    events: list[SseEvent] = field(default_factory=list)

    @property
    def text(self) -> str:
        return reply_text(self.events)

    @property
    def restarts(self) -> list[SseEvent]:
        return [e for e in self.events if e.event == "restarted"]

    @property
    def final(self) -> SseEvent | None:
        return next((e for e in reversed(self.events) if e.event in ("done", "error")), None)

    @property
    def head(self) -> dict[str, Any]:
        return next((e.data for e in self.events if e.event == "message"), {})


def reply_text(events: list[SseEvent]) -> str:
    """The reply as a reader shows it: deltas appended; ``restarted`` keeps the first ``offset_chars``.

    A worker that died mid-reply is replaced by one that continues from the text
    recorded so far (``offset_chars`` characters, never more than was streamed).
    """
    text = ""
    for e in events:
        if e.event == "delta":
            text += e.data.get("text", "")
        elif e.event == "restarted":
            text = text[: int(e.data.get("offset_chars", 0))]
    return text


class ApiError(Exception):
    def __init__(self, status: int, body: Any, headers: httpx.Headers) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body
        self.headers = headers


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    event, data, cursor = "message", [], None
    async for line in lines:
        if line == "":
            if data:
                yield SseEvent(event, json.loads("\n".join(data)), cursor)
            event, data, cursor = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                cursor = value


#: The web page's session cookie (gateway/sessions.py COOKIE).
SESSION_COOKIE = "__Host-parley_session"


def session_headers(base_url: str, session_id: str, csrf_token: str) -> dict[str, str]:
    """What the web page sends on its session: the cookie, the CSRF token and its own origin. Set as a
    header, since a cookie jar keeps a ``Secure`` cookie off plain HTTP."""
    return {"Cookie": f"{SESSION_COOKIE}={session_id}", "X-CSRF-Token": csrf_token, "Origin": base_url.rstrip("/")}


class ParleyClient:
    def __init__(
        self, base_url: str, api_key: str, timeout: float = 120.0, reply_deadline_s: float | None = None,
        *, session: tuple[str, str] | None = None,
    ) -> None:  # fmt: skip
        """``timeout``: the longest wait for any one read; ``reply_deadline_s``: the longest ``send`` waits for a
        whole reply (None: no limit). A stream kept open by keep-alive comments never trips the first.
        ``session``: (session id, CSRF token) of a web sign-in to call as instead of a key (``api_key`` unused):
        what the key's ``chat`` scope does not reach (keys, erasure, an organisation's administration)."""
        self._reply_deadline_s = reply_deadline_s
        headers = session_headers(base_url, *session) if session else {"Authorization": f"Bearer {api_key}"}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=httpx.Timeout(timeout, connect=10))

    async def close(self) -> None:
        await self._http.aclose()

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(response.status_code, _body(response), response.headers)
        return response.json() if response.status_code != 204 else None

    async def create_conversation(self, title: str = "") -> str:
        return (await self._json("POST", "/v1/conversations", json={"title": title}))["id"]

    async def conversations(self, *, archived: bool = False) -> list[dict[str, Any]]:
        params = {"archived": "true"} if archived else None
        return (await self._json("GET", "/v1/conversations", params=params))["conversations"]

    async def search(self, q: str, limit: int | None = None) -> list[dict[str, Any]]:
        """``GET /v1/search``: the caller's conversations that ``q`` finds, best first."""
        params: dict[str, Any] = {"q": q} | ({"limit": limit} if limit is not None else {})
        return (await self._json("GET", "/v1/search", params=params))["results"]

    async def update_conversation(self, conversation_id: str, **changes: Any) -> dict[str, Any]:
        """``title=`` and/or ``archived=``."""
        return await self._json("PATCH", f"/v1/conversations/{conversation_id}", json=changes)

    async def delete_conversation(self, conversation_id: str) -> None:
        response = await self._http.delete(f"/v1/conversations/{conversation_id}")
        if response.status_code >= 400:
            raise ApiError(response.status_code, _body(response), response.headers)

    async def conversation(self, conversation_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/conversations/{conversation_id}")

    async def tool_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        return (await self._json("GET", f"/v1/conversations/{conversation_id}/tool-calls"))["tool_calls"]

    async def answer_tool_call(
        self, conversation_id: str, call_id: str, answer: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"answer": answer, **({"arguments": arguments} if arguments is not None else {})}
        return await self._json("POST", f"/v1/conversations/{conversation_id}/tool-calls/{call_id}", json=body)

    async def upload(
        self, filename: str, data: bytes, media_type: str = "application/octet-stream", conversation_id: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/documents``: the document as first stored (status ``processing``)."""
        form = {"conversation_id": conversation_id} if conversation_id else None
        return await self._json("POST", "/v1/documents", files={"file": (filename, data, media_type)}, data=form)

    async def document(self, document_id: str) -> dict[str, Any]:
        return await self._json("GET", f"/v1/documents/{document_id}")

    async def until_processed(self, document_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
        """Poll the document until it is ``ready`` or ``failed``."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = await self.document(document_id)
            if found["status"] in ("ready", "failed") or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.25)

    async def stream_message(
        self,
        conversation_id: str,
        content: str,
        *,
        client_message_id: str | None = None,
        parent_id: str | None | object = ...,
        model: str | None = None,
        headers: dict[str, str] | None = None,
        document_ids: list[str] | None = None,
        max_tokens: int | None = None,
        tools: list[str] | None = None,
    ) -> AsyncIterator[SseEvent]:
        body: dict[str, Any] = {"content": content, "client_message_id": client_message_id or uuid.uuid4().hex}
        if document_ids:
            body["document_ids"] = document_ids
        if tools:
            body["tools"] = tools
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if parent_id is not ...:
            body["parent_id"] = parent_id
        if model:
            body["model"] = model
        path = f"/v1/conversations/{conversation_id}/messages"
        async with self._http.stream("POST", path, json=body, headers=headers) as response:
            if response.status_code >= 400:
                await response.aread()
                raise ApiError(response.status_code, _body(response), response.headers)
            async for event in parse_sse(response.aiter_lines()):
                yield event
                if event.event in ("done", "error"):
                    return

    async def send(self, conversation_id: str, content: str, **kwargs: Any) -> Reply:
        reply = Reply()
        try:
            async with asyncio.timeout(self._reply_deadline_s):
                async for event in self.stream_message(conversation_id, content, **kwargs):
                    reply.events.append(event)
        except TimeoutError:
            raise TimeoutError(
                f"no end to the reply after {self._reply_deadline_s} s; events so far: {[e.event for e in reply.events][-5:]}"
            ) from None
        return reply


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
