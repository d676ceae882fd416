"""The gateway: REST + SSE in front of the event log (DESIGN.md §7).

Writes are appends to Kafka (``chat.events``); reads come from Cassandra (the
materialised tree) and from ``chat.tokens`` (live replies). A handler
authenticates, validates, derives ids, appends, and streams; it never waits
for a processor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gateway import replies
from gateway.auth import Authenticator, Principal
from gateway.errors import ApiError, NotFound, ServiceUnavailable, Unprocessable
from gateway.settings import GatewaySettings
from gateway.store import Conversation, Store
from gateway.tokens import TokenStreams
from gateway.validation import MISSING, json_body, string, uuid_string
from parley import ids
from parley.cassandra import connect
from parley.errors import Unavailable
from parley.kafka import EventProducer
from parley.settings import CassandraSettings, KafkaSettings
from schemas.events import ConversationCreated, Event, GenerationRequested, MessagePosted

log = logging.getLogger(__name__)

ID_MAX = 200  # client ids, model names


@dataclass
class Services:
    settings: GatewaySettings
    store: Store
    producer: EventProducer
    tokens: TokenStreams
    auth: Authenticator
    session: Any


def _services(request: Request) -> Services:
    return request.app.state.services


async def _append(svc: Services, *events: Event) -> None:
    """Append events (same key → same partition, in order) and wait for the broker's acknowledgement."""
    try:
        await asyncio.wait_for(
            asyncio.gather(*(svc.producer.send(e) for e in events)), timeout=svc.settings.append_timeout_s
        )
    except (Unavailable, asyncio.TimeoutError) as exc:
        log.warning("append failed", extra={"error": type(exc).__name__})
        raise ServiceUnavailable(
            "the event log is not accepting writes right now; retry shortly",
            code="log_unavailable",
            retry_after=svc.settings.retry_after_s,
        ) from exc


async def _owned(svc: Services, user: Principal, conversation_id: str) -> Conversation:
    conversation = await svc.store.conversation(conversation_id)
    if conversation is None or conversation.user_id != user.user_id:
        raise NotFound("no such conversation")  # another user's conversation is indistinguishable from none
    return conversation


# ------------------------------------------------------------------ handlers


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    svc = _services(request)
    ready = svc.tokens.healthy and not request.app.state.draining
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


OPENAPI = Path(__file__).resolve().parent.parent / "schemas" / "openapi.yaml"
STATIC = Path(__file__).resolve().parent / "static"


async def index(request: Request) -> Response:
    """The web client: static files, no build step."""
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def openapi(request: Request) -> Response:
    if request.url.path.endswith(".json"):
        return JSONResponse(yaml.safe_load(OPENAPI.read_text()))
    return Response(OPENAPI.read_text(), media_type="application/yaml")


async def create_conversation(request: Request) -> Response:
    svc = _services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes, required=False)
    title = string(body, "title", max_chars=200, required=False, allow_empty=True)
    model = string(body, "model", max_chars=ID_MAX, required=False)
    event = ConversationCreated(
        conversation_id=str(uuid.uuid4()),
        user_id=user.user_id,
        title="" if title in (MISSING, None) else title,
        model=None if model is MISSING else model,
        trace_id=request.headers.get("x-request-id", ""),
    )
    await _append(svc, event)
    # Written through as well, with the event's own timestamp (identical to what the materializer
    # writes), so the creator can use the conversation at once, even on another gateway.
    await svc.store.write_through(event)
    return JSONResponse(_conversation_json(event), status_code=201)


def _conversation_json(event: ConversationCreated) -> dict[str, Any]:
    created = datetime.fromtimestamp(event.occurred_at / 1e6, tz=timezone.utc)
    return {"id": event.conversation_id, "title": event.title, "model": event.model, "created_at": created.isoformat()}


async def list_conversations(request: Request) -> Response:
    svc = _services(request)
    user = await svc.auth(request)
    return JSONResponse({"conversations": await svc.store.conversations_of(user.user_id)})


async def get_conversation(request: Request) -> Response:
    svc = _services(request)
    user = await svc.auth(request)
    conversation = await _owned(svc, user, request.path_params["conversation_id"])
    messages = await svc.store.messages(conversation.id)
    return JSONResponse(
        {
            "id": conversation.id,
            "title": conversation.title,
            "model": conversation.model,
            "selected_leaf_id": conversation.selected_leaf_id,
            "messages": [
                {
                    "id": m.id,
                    "parent_id": m.parent_id,
                    "role": m.role,
                    "content": m.content,
                    "model": m.model,
                    "status": m.status,
                    "finish_reason": m.finish_reason,
                    "created_at": m.created_at.replace(tzinfo=timezone.utc).isoformat() if m.created_at else None,
                }
                for m in messages
            ],
        }
    )


async def post_message(request: Request) -> Response:
    svc = _services(request)
    user = await svc.auth(request)
    conversation_id = request.path_params["conversation_id"]
    body = await json_body(request, svc.settings.max_body_bytes)
    content = string(body, "content", max_chars=svc.settings.max_message_chars)
    client_message_id = string(body, "client_message_id", max_chars=ID_MAX)
    model = string(body, "model", max_chars=ID_MAX, required=False)
    parent_id = string(body, "parent_id", max_chars=ID_MAX, required=False)
    conversation = await _owned(svc, user, conversation_id)
    messages = await svc.store.messages(conversation.id)
    known = {m.id for m in messages}

    if parent_id is MISSING:  # continue the selected branch
        parent_id = conversation.selected_leaf_id if conversation.selected_leaf_id in known else None
        if parent_id is None and messages:
            parent_id = messages[-1].id
    elif parent_id is not None:
        parent_id = uuid_string(parent_id, "parent_id")
        if parent_id not in known:
            raise Unprocessable("`parent_id` is not a message of this conversation", code="unknown_parent")

    user_message_id = ids.user_message_id(conversation.id, client_message_id)
    reply_id = ids.reply_id(conversation.id, client_message_id)
    partition = svc.tokens.partition_of(conversation.id)

    existing = next((m for m in messages if m.id == reply_id), None)
    if existing is not None:  # a retried POST: the same reply, not a second one
        return _replay(svc, conversation.id, user_message_id, existing, partition)

    try:
        noted = await svc.tokens.note_end(partition)
    except Unavailable as exc:
        raise ServiceUnavailable("the token stream is unavailable; retry shortly", retry_after=svc.settings.retry_after_s) from exc
    stream = svc.tokens.open(reply_id, partition, noted)
    trace_id = request.headers.get("x-request-id", "") or uuid.uuid4().hex
    common = {"conversation_id": conversation.id, "user_id": user.user_id, "trace_id": trace_id}
    try:
        await _append(
            svc,
            MessagePosted(
                **common,
                message_id=user_message_id,
                parent_id=parent_id,
                client_message_id=client_message_id,
                content=content,
                model=None if model is MISSING else model,
            ),
            GenerationRequested(
                **common,
                request_id=reply_id,
                parent_id=user_message_id,
                client_message_id=client_message_id,
                model=None if model is MISSING else model,
                tier=user.tier,
                token_offset=noted,
            ),
        )
    except ApiError:
        svc.tokens.close_stream(stream)
        raise
    head = [replies.message_event(conversation.id, user_message_id, reply_id, f"{partition}:{noted - 1}")]
    return _sse(svc, replies.live(svc.tokens, stream, head))


def _replay(svc: Services, conversation_id: str, user_message_id: str, reply: Any, partition: int) -> Response:
    offset = reply.stream_offset if reply.stream_offset is not None else 0
    head = [replies.message_event(conversation_id, user_message_id, reply.id, f"{partition}:{offset - 1}")]
    if reply.status in replies.FINISHED:
        return _sse(svc, _iterate(replies.stored(reply, head, f"{partition}:{offset - 1}")))
    stream = svc.tokens.open(reply.id, partition, offset)
    return _sse(svc, replies.live(svc.tokens, stream, head))


async def _iterate(events: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        yield event


def _sse(svc: Services, events: AsyncIterator[dict[str, Any]]) -> Response:
    return EventSourceResponse(events, ping=svc.settings.stream_ping_s, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


# ------------------------------------------------------------------ app


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return ApiError(str(exc.detail), code=code, status=exc.status_code).response()


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("backing service unavailable", extra={"error": type(exc).__name__})
    return ServiceUnavailable(
        "a backing service is unavailable; retry shortly", retry_after=_services(request).settings.retry_after_s
    ).response()


async def _internal(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", extra={"path": request.url.path})
    return ApiError("internal error", code="internal", status=500).response()


def create_app(settings: GatewaySettings, kafka: KafkaSettings, cassandra: CassandraSettings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        session = await asyncio.to_thread(connect, cassandra)
        store = Store(session, cassandra.keyspace)
        producer = EventProducer(kafka)
        tokens = TokenStreams(kafka)
        tokens.start()
        app.state.services = Services(settings, store, producer, tokens, Authenticator(store, settings.auth_cache_s), session)
        app.state.draining = False
        try:
            yield
        finally:
            tokens.close()
            producer.close(5)
            session.cluster.shutdown()

    routes = [
        Route("/", index),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route("/openapi.yaml", openapi),
        Route("/openapi.json", openapi),
        Route("/v1/conversations", create_conversation, methods=["POST"]),
        Route("/v1/conversations", list_conversations, methods=["GET"]),
        Route("/v1/conversations/{conversation_id}", get_conversation, methods=["GET"]),
        Route("/v1/conversations/{conversation_id}/messages", post_message, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, ApiError: _api_error, Unavailable: _unavailable, Exception: _internal},
    )
