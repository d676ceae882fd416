"""The HTTP face of the CPU engine: the subset of SGLang's native API Parley's workers use.

| route | as in SGLang |
|---|---|
| ``POST /generate`` | ``text``, ``sampling_params``, ``stream``, ``rid`` (SGLang's other fields refused by name); SSE of outputs, ``data: [DONE]``: cumulative, or each event's own text and ids under ``--incremental-streaming-output`` |
| ``POST /abort_request`` | ``{"rid"}`` or ``{"abort_all": true}``; the stream ends with finish_reason abort |
| ``GET /health``, ``/health_generate`` | 200 when serving (the latter generates one token), else 503 |
| ``GET /get_model_info``, ``/v1/models`` | model path, ``is_generation``, ``max_model_len``; plus ``untrained`` |
| ``GET /get_load``, ``/v1/loads``, ``/get_server_info`` | running / waiting requests, token usage, cache hit rate; ``/get_server_info`` also SGLang's ``incremental_streaming_output`` and ``parley_sampling_params`` (Parley's own: which sampling params are applied, accepted without effect, refused) |

Errors follow SGLang: a request refused while tokenizing or validating (an
out-of-range or unsupported sampling param among them, named in the message) is HTTP
400 ``{"error": {"message"}}`` when not streamed, and, when streamed, a 200
stream whose only event is that error object followed by ``[DONE]``.
Prompts and replies are never logged; ids and counts are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from workers.engine import protocol
from workers.engine.protocol import GenerateInput, InvalidRequest, Progress, Sampling
from workers.engine.request import Backend, RequestState

log = logging.getLogger("workers.engine")

HEALTH_CHECK_TIMEOUT_S = 20.0
VERSION = "parley-cpu-engine-0.1"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _event(obj: Any) -> bytes:
    return b"data: " + _dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse(protocol.error_body(message), status_code=400)


def create_app(backend: Backend, info: dict[str, Any] | None = None, *, incremental_streaming_output: bool = False) -> Starlette:
    """``info``: extra settings shown by /get_server_info (backend name, limits).
    ``incremental_streaming_output``: SGLang's flag of that name (see ``_stream``)."""
    extra_info = dict(info or {}) | {"incremental_streaming_output": incremental_streaming_output}

    async def generate(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _bad_request("The request body is not valid JSON.")
        try:
            gen = protocol.parse_generate(body)
        except InvalidRequest as exc:
            # SGLang validates a request (sampling params too) inside the stream it has already started.
            if isinstance(body, dict) and body.get("stream"):
                return StreamingResponse(_error_stream(str(exc)), media_type="text/event-stream")
            return _bad_request(str(exc))
        try:
            state = backend.submit(gen)
        except InvalidRequest as exc:
            log.info("request refused", extra={"rid": gen.rid, "reason": type(exc).__name__})
            if gen.stream:
                return StreamingResponse(_error_stream(str(exc)), media_type="text/event-stream")
            return _bad_request(str(exc))
        log.info(
            "request queued",
            extra={"rid": gen.rid, "prompt_tokens": state.prompt_tokens, "max_new_tokens": gen.sampling.max_new_tokens, "stream": gen.stream},
        )
        if gen.stream:
            return StreamingResponse(_stream(state), media_type="text/event-stream")
        steps: list[Progress] = []
        try:
            async for p in state.progress():
                steps.append(p)
        finally:
            if not state.finished:
                backend.abort(gen.rid)  # the client went away before the reply was complete
        last = protocol.joined(steps)
        assert last.finish_reason is not None
        _log_finished(state, last)
        reason = last.finish_reason
        if reason.get("type") == "abort" and reason.get("status_code") is not None:
            # SGLang raises these for non-streamed requests instead of returning them.
            return JSONResponse(protocol.error_body(str(reason.get("message"))), status_code=int(reason["status_code"]))
        return JSONResponse(protocol.output(gen.rid, last.text, last.output_ids, last, time.monotonic() - state.created))

    async def _stream(state: RequestState) -> AsyncIterator[bytes]:
        """SGLang's stream: by default every event carries the whole reply so far (O(n) per event, O(n²)
        per reply, on both sides); with ``--incremental-streaming-output`` only what it adds."""
        reply = _Reply()
        try:
            async for p in state.progress():
                latency = time.monotonic() - state.created if p.finish_reason is not None else None
                if incremental_streaming_output:
                    yield _event(protocol.output(state.rid, p.text, p.output_ids, p, latency))
                else:
                    reply.add(p)
                    yield _event(protocol.output(state.rid, reply.text, reply.ids, p, latency))
                if p.finish_reason is not None:
                    _log_finished(state, p)
            yield DONE
        finally:
            if not state.finished:
                # Client disconnected mid-stream: free the batch slot, as SGLang does.
                backend.abort(state.rid)

    async def _error_stream(message: str) -> AsyncIterator[bytes]:
        yield _event(protocol.error_body(message))
        yield DONE

    async def abort_request(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _bad_request("The request body is not valid JSON.")
        if not isinstance(body, dict):
            return _bad_request("The request body must be a JSON object.")
        if body.get("abort_all"):
            backend.abort_all()
        elif body.get("rid"):
            backend.abort(str(body["rid"]))
        log.info("abort requested", extra={"rid": body.get("rid"), "abort_all": bool(body.get("abort_all"))})
        return Response(status_code=200)

    async def health(request: Request) -> Response:
        return Response(status_code=200 if backend.ready() else 503)

    async def health_generate(request: Request) -> Response:
        if not backend.ready():
            return Response(status_code=503)
        rid = f"HEALTH_CHECK_{time.time()}"
        probe = GenerateInput(rid=rid, text="Hi", sampling=Sampling(max_new_tokens=1, temperature=0.0), stream=False)
        try:
            state = backend.submit(probe)

            async def first() -> None:
                async for _ in state.progress():
                    return

            await asyncio.wait_for(first(), HEALTH_CHECK_TIMEOUT_S)
        except (asyncio.TimeoutError, InvalidRequest):
            backend.abort(rid)
            log.error("health check generation got no token", extra={"timeout_s": HEALTH_CHECK_TIMEOUT_S})
            return Response(status_code=503)
        return Response(status_code=200)

    async def get_model_info(request: Request) -> Response:
        return JSONResponse(
            {
                "model_path": backend.model_path,
                "tokenizer_path": backend.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "untrained": backend.untrained,
                "context_length": backend.context_length,
            }
        )

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": backend.model_path,
                        "object": "model",
                        "created": int(started),
                        "owned_by": "sglang",
                        "root": backend.model_path,
                        "max_model_len": backend.context_length,
                    }
                ],
            }
        )

    async def get_load(request: Request) -> Response:
        s = backend.load()
        return JSONResponse([{"dp_rank": 0, "num_reqs": s.running, "num_waiting_reqs": s.waiting, "num_tokens": s.used_tokens}])

    async def loads(request: Request) -> Response:
        s = backend.load()
        usage = s.used_tokens / s.max_total_tokens if s.max_total_tokens else 0.0
        rank = {
            "dp_rank": 0,
            "num_running_reqs": s.running,
            "num_waiting_reqs": s.waiting,
            "num_total_reqs": s.running + s.waiting,
            "num_used_tokens": s.used_tokens,
            "max_total_num_tokens": s.max_total_tokens,
            "token_usage": usage,
            "gen_throughput": s.gen_throughput,
            "cache_hit_rate": s.cache_hit_rate,
            "utilization": usage,
            "max_running_requests": s.max_running,
        }
        return JSONResponse(
            {
                "timestamp": datetime.now(timezone.utc).isoformat(),
                "version": VERSION,
                "dp_rank_count": 1,
                "loads": [rank],
                "aggregate": {
                    "total_running_reqs": s.running,
                    "total_waiting_reqs": s.waiting,
                    "total_reqs": s.running + s.waiting,
                    "total_used_tokens": s.used_tokens,
                    "total_tokens": s.max_total_tokens,
                    "avg_token_usage": usage,
                    "avg_throughput": s.gen_throughput,
                    "avg_utilization": usage,
                },
            }
        )

    async def server_info(request: Request) -> Response:
        s = backend.load()
        return JSONResponse(
            {
                **extra_info,
                "model_path": backend.model_path,
                "context_length": backend.context_length,
                "max_running_requests": s.max_running,
                "max_total_num_tokens": s.max_total_tokens,
                "untrained": backend.untrained,
                "internal_states": [{"last_gen_throughput": s.gen_throughput, **s.internal}],
                "version": VERSION,
                # Parley's own key (SGLang has none): what sampling_params do here.
                "parley_sampling_params": {
                    "applied": sorted(backend.sampling_applied),
                    "accepted_without_effect": sorted(protocol.IMPLEMENTED - backend.sampling_applied),
                    "refused_unless_neutral": sorted(protocol.UNSUPPORTED),
                },
            }
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await backend.start()
        try:
            yield
        finally:
            await backend.stop()

    started = time.time()

    def get(path: str, endpoint: Callable[[Request], Any]) -> Route:
        return Route(path, endpoint, methods=["GET"])

    return Starlette(
        routes=[
            Route("/generate", generate, methods=["POST", "PUT"]),
            Route("/abort_request", abort_request, methods=["POST"]),
            get("/health", health),
            get("/health_generate", health_generate),
            get("/get_model_info", get_model_info),
            get("/model_info", get_model_info),
            get("/v1/models", models),
            get("/get_load", get_load),
            get("/v1/loads", loads),
            get("/get_server_info", server_info),
            get("/server_info", server_info),
        ],
        lifespan=lifespan,
    )


class _Reply:
    """The whole reply so far, from a stream's deltas (what SGLang's ReqState keeps)."""

    def __init__(self) -> None:
        self.text = ""
        self.ids: list[int] = []

    def add(self, p: Progress) -> None:
        self.text += p.text
        self.ids.extend(p.output_ids)


def _log_finished(state: RequestState, p: Progress) -> None:
    reason = p.finish_reason or {}
    log.info(
        "request finished",
        extra={
            "rid": state.rid,
            "finish": reason.get("type"),
            "prompt_tokens": p.prompt_tokens,
            "completion_tokens": p.completion_tokens,
            "cached_tokens": p.cached_tokens,
        },
    )
