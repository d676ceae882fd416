"""The gateway: REST + SSE in front of the event log (DESIGN.md §7).

Writes are appends to Kafka (``chat.events``, ``chat.control``); reads come from
Cassandra (the materialised tree) and from ``chat.tokens`` (live replies). The
handlers live in ``conversations.py`` and ``messages.py``; this module wires
them, the error handlers and the process's clients together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import yaml
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from documents.blobs import blob_store
from documents.index import DocumentIndex
from documents.settings import DocumentSettings
from gateway import (
    admin, conversations, documents, export, feedback, imports, memory, messages, models, moderations, openai_compat, org_tools,
    search, shares,
    telemetry, tool_calls, usage,
)
from gateway.auth import Authenticator
from gateway.directory import Directory
from gateway.experiments import Experiments
from gateway.errors import ApiError, ServiceUnavailable
from gateway.services import DocumentServices, Services, services
from gateway.quotas import Quotas, QuotaStore
from gateway.settings import GatewaySettings, QuotaSettings
from gateway.pressure import PoolPressure
from gateway.store import Store
from gateway.tokens import TokenStreams
from gateway.tracing import TraceMiddleware, route_of
from gateway import client_address, oidc, sessions
from gateway.security_headers import SecurityHeadersMiddleware
from gateway.session_store import SessionStore
from gateway.settings import OidcSettings, SessionSettings
from parley import keys, schema_registry, tool_registry
from parley.org_tools import OrgTools
from parley.cassandra import AsyncCql, connect
from parley.errors import Unavailable
from parley.kafka import AtomicAppender, EventProducer
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import sealing
from streams.erasure_rows import ErasureRows
from streams.search_index import SearchIndex
from streams.tool_store import ToolStore
from streams.router import policy_from
from streams.settings import RouterSettings

#: The most one Cassandra statement of a request may take, its first prepare included: an auth read and a data
#: read fit in a reader's 30 s with room, and a paused node is a 503 in seconds (parley/cassandra.py AsyncCql).
CQL_DEADLINE_S = 10.0

log = logging.getLogger(__name__)

OPENAPI = Path(__file__).resolve().parent.parent / "schemas" / "openapi.yaml"
STATIC = Path(__file__).resolve().parent / "static"


async def index(request: Request) -> Response:
    """The web client: static files, no build step."""
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready: reading tokens, Kafka answering, not draining. (Cassandra down is not unready: posting works.)"""
    svc = services(request)
    checks = {"tokens": svc.tokens.healthy, "kafka": svc.broker_up, "draining": request.app.state.draining or svc.drain.draining}
    ready = checks["tokens"] and checks["kafka"] and not checks["draining"]
    shard = svc.tokens.shard  # the edge checks it against its own list of gateways
    return JSONResponse({"ready": ready, **checks, "shard": str(shard) if shard else None}, status_code=200 if ready else 503)


async def openapi(request: Request) -> Response:
    if request.url.path.endswith(".json"):
        return JSONResponse(yaml.safe_load(OPENAPI.read_text()))
    return Response(OPENAPI.read_text(), media_type="application/yaml")


# ------------------------------------------------------------------ errors


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return ApiError(str(exc.detail), code=code, status=exc.status_code).response()


async def _client_left(request: Request, exc: Exception) -> Response:
    """The client hung up while its body was being read: nobody gets this answer, and nothing went wrong
    here (it used to be logged as an unhandled error and counted as a 500). 499, as nginx records it."""
    log.info("client left before its request was read", extra={"route": _route(request)})
    return Response(status_code=499)


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("backing service unavailable", extra={"error": type(exc).__name__})
    return ServiceUnavailable(
        "a backing service is unavailable; retry shortly", retry_after=services(request).settings.retry_after_s
    ).response()


async def _internal(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", extra={"route": _route(request)})
    return ApiError("internal error", code="internal", status=500).response()


def _route(request: Request) -> str:
    """The route's template, never the path: a path may hold a share link's secret (/s/<secret>)."""
    return route_of(ROUTES, request.scope)


EXCEPTION_HANDLERS = {
    HTTPException: _http_error,
    ApiError: _api_error,
    Unavailable: _unavailable,
    ClientDisconnect: _client_left,
    Exception: _internal,
}


# ------------------------------------------------------------------ background


#: A metadata request slower than this counts as Kafka not answering.
BROKER_PROBE_TIMEOUT_S = 3.0


async def watch_broker(svc: Services) -> None:
    """Keep ``svc.broker_up`` current: readiness, and an immediate 503 instead of a doomed append."""
    while True:
        up = await asyncio.to_thread(svc.producer.reachable, "chat.events", BROKER_PROBE_TIMEOUT_S)
        if up != svc.broker_up:
            (log.info if up else log.warning)("kafka reachable" if up else "kafka unreachable")
        svc.broker_up = up
        await asyncio.sleep(svc.settings.broker_probe_s)


async def drain(app: Starlette) -> int:
    """SIGTERM: unready and refusing new streams now; live streams until PARLEY_GATEWAY_DRAIN_S, then cut.

    Returns how many streams were cut; the caller then lets the server shut down.
    """
    app.state.draining = True
    svc: Services = app.state.services
    return await svc.drain.run(svc.settings.drain_s)


# ------------------------------------------------------------------ app


ROUTES = [
    Route("/", index),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
    Route("/healthz", healthz),
    Route("/readyz", readyz),
    Route("/health", readyz),  # vLLM's and SGLang's probe, which serving benchmarks (GuideLLM) check first
    Route("/openapi.yaml", openapi),
    Route("/openapi.json", openapi),
    Route("/v1/conversations", conversations.create_conversation, methods=["POST"]),
    Route("/v1/conversations", conversations.list_conversations, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}", conversations.get_conversation, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}", conversations.update_conversation, methods=["PATCH"]),
    Route("/v1/conversations/{conversation_id}", conversations.delete_conversation, methods=["DELETE"]),
    Route("/v1/conversations/{conversation_id}/messages", conversations.post_message, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}/leaf", conversations.select_leaf, methods=["PUT"]),
    Route("/v1/conversations/{conversation_id}/export", export.export_conversation, methods=["GET"]),
    Route("/v1/imports", imports.import_conversations, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}/shares", shares.create_share, methods=["POST"]),
    Route("/v1/conversations/{conversation_id}/shares", shares.list_shares, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/shares/{share_id}", shares.revoke_share, methods=["DELETE"]),
    Route("/v1/shares/{secret}", shares.view_share, methods=["GET"]),
    Route("/v1/shares/{secret}/fork", shares.fork_share, methods=["POST"]),
    Route("/s/{secret}", shares.share_page, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/messages/{message_id}/feedback", feedback.rate, methods=["PUT"]),
    Route("/v1/conversations/{conversation_id}/messages/{message_id}/feedback", feedback.unrate, methods=["DELETE"]),
    Route("/v1/conversations/{conversation_id}/tool-calls", tool_calls.list_tool_calls, methods=["GET"]),
    Route("/v1/conversations/{conversation_id}/tool-calls/{call_id}", tool_calls.answer_tool_call, methods=["POST"]),
    Route("/v1/search", search.search, methods=["GET"]),
    Route("/v1/documents", documents.upload, methods=["POST"]),
    Route("/v1/documents", documents.list_documents, methods=["GET"]),
    Route("/v1/documents/{document_id}", documents.get_document, methods=["GET"]),
    Route("/v1/documents/{document_id}", documents.delete_document, methods=["DELETE"]),
    Route("/v1/documents/{document_id}/pages/{page}", documents.get_page, methods=["GET"]),
    Route("/v1/usage", usage.get_usage, methods=["GET"]),
    Route("/v1/telemetry", telemetry.post_telemetry, methods=["POST"]),
    Route("/v1/memory", memory.get_memory, methods=["GET"]),
    Route("/v1/memory", memory.put_memory, methods=["PUT"]),
    Route("/v1/memory", memory.delete_memory, methods=["DELETE"]),
    Route("/v1/messages/{message_id}/stop", messages.stop, methods=["POST"]),
    Route("/v1/messages/{message_id}/regenerate", messages.regenerate, methods=["POST"]),
    Route("/v1/messages/{message_id}/stream", messages.stream, methods=["GET"]),
    Route("/v1/chat/completions", openai_compat.chat_completions, methods=["POST"]),
    Route("/v1/moderations", moderations.create_moderation, methods=["POST"]),
    Route("/v1/models", models.list_models, methods=["GET"]),
    Route("/v1/me", admin.get_me, methods=["GET"]),
    Route("/v1/me", admin.erase_me, methods=["DELETE"]),
    Route("/v1/me/export", export.export_account, methods=["GET"]),
    Route("/v1/me/keys", admin.list_my_keys, methods=["GET"]),
    Route("/v1/me/keys", admin.create_my_key, methods=["POST"]),
    Route("/v1/me/keys/{key_id}", admin.revoke_my_key, methods=["DELETE"]),
    Route("/v1/org", admin.get_org, methods=["GET"]),
    Route("/v1/org", admin.update_org, methods=["PATCH"]),
    Route("/v1/org/users", admin.list_members, methods=["GET"]),
    Route("/v1/org/users", admin.add_member, methods=["POST"]),
    Route("/v1/org/users/{user_id}", admin.update_member, methods=["PATCH"]),
    Route("/v1/org/users/{user_id}", admin.erase_member, methods=["DELETE"]),
    Route("/v1/org/users/{user_id}/erasure", admin.member_erasure, methods=["GET"]),
    Route("/v1/org/users/{user_id}/keys", admin.list_member_keys, methods=["GET"]),
    Route("/v1/org/users/{user_id}/keys/{key_id}", admin.revoke_member_key, methods=["DELETE"]),
    Route("/v1/org/usage", admin.org_usage, methods=["GET"]),
    Route("/v1/org/tools", org_tools.list_org_tools, methods=["GET"]),
    Route("/v1/org/tools", org_tools.add_org_tools, methods=["POST"]),
    Route("/v1/org/tools/{name}", org_tools.remove_org_tools, methods=["DELETE"]),
    Route("/v1/models/{model_id:path}", models.get_model, methods=["GET"]),
]

# Web sign-in (gateway/sessions.py, gateway/oidc.py): password accounts or an organisation's OpenID provider →
# cookie sessions, CSRF-checked.
ROUTES += sessions.ROUTES + oidc.ROUTES


def create_app(settings: GatewaySettings, kafka: KafkaSettings, cassandra: CassandraSettings) -> Starlette:
    session_settings = from_env(SessionSettings)  # web sign-in and the response headers (gateway/sessions.py)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # ops.experiments: each turn's arm (gateway/turns.py stamps it); read while the rest starts (~1 s)
        experiments = Experiments(kafka)
        experiments.start()
        session = await asyncio.to_thread(connect, cassandra)
        key_service = await asyncio.to_thread(keys.install_from_env, session)  # seals what it appends, opens what it reads
        await asyncio.to_thread(schema_registry.install, kafka)  # before the first append
        cql = AsyncCql(cassandra, session, deadline_s=CQL_DEADLINE_S)
        store = Store(cql)
        # An append the client was told failed (503 after PARLEY_GATEWAY_APPEND_TIMEOUT_S) should not
        # land much later: librdkafka gives it up at about the same time.
        producer = EventProducer(kafka, **{"delivery.timeout.ms": int(settings.append_timeout_s * 1000) + 1000})
        tokens = TokenStreams(kafka, settings.token_shard, settings.borrowed_idle_s)
        tokens.start()
        policy = policy_from(from_env(RouterSettings))  # the router's thresholds: one verdict, two places
        pressure = PoolPressure(kafka, policy.admission, list(policy.pools), policy.heartbeat_expiry_s)
        pressure.start()
        directory = Directory(cql)
        auth = Authenticator(directory, settings.auth_cache_s, settings.auth_stale_s, region=settings.region)
        svc = Services(settings, store, producer, tokens, auth, session, pressure, directory=directory, keys=key_service)
        svc.experiments = experiments
        svc.tools = tool_registry.load(from_env(tool_registry.ToolSettings).tools_file)  # a bad file fails the start
        svc.tool_calls = ToolStore(cql, sealing.sealer())
        svc.org_tools = OrgTools(cql)
        # Imports, all or nothing; a transactional id of this process alone (a restart aborts what it left open).
        svc.atomic = AtomicAppender(kafka, f"{kafka.topic('gateway.imports')}.{uuid.uuid4().hex}")
        svc.search = SearchIndex(cql, sealing.sealer())
        svc.erasures = ErasureRows(cassandra, cql)  # requests refuse the user and record the job (gateway/erasure.py)
        app.state.services = svc
        app.state.router_policy = policy  # the models it serves: POST /v1/chat/completions checks `model`
        svc.quotas = Quotas(from_env(QuotaSettings), QuotaStore(cql))
        doc_settings = from_env(DocumentSettings)
        svc.documents = DocumentServices(doc_settings, blob_store(doc_settings.blob_url), DocumentIndex(cql))
        app.state.draining = False
        app.state.moderations = moderations.Moderations()
        svc.spawn(watch_broker(svc))
        # Web sign-in: the page's cookie sessions, which the authenticator accepts besides API keys.
        app.state.web_sessions = auth.sessions = sessions.WebSessions(session_settings, SessionStore(cql))
        app.state.oidc = oidc.Oidc.configured(from_env(OidcSettings), cql)  # an organisation's OpenID provider, if set
        await asyncio.to_thread(experiments.wait_ready)  # the first turns see the running experiments too
        try:
            yield
        finally:
            for task in list(svc.background):
                task.cancel()
            tokens.close()
            pressure.close()
            experiments.close()
            producer.close(5)
            await asyncio.to_thread(svc.atomic.close)
            session.cluster.shutdown()

    return Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        middleware=[
            client_address.middleware(settings.proxies),  # request.client: the peer, or what a trusted proxy saw
            Middleware(TraceMiddleware, routes=ROUTES),
            Middleware(SecurityHeadersMiddleware, hsts_s=session_settings.hsts_s),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
    )
