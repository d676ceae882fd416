"""``SGLangClient``: the ``EngineClient`` spoken over SGLang's native HTTP API.

The same client talks to a real SGLang server and to Parley's CPU engine. The
wire is read in two steps: ``parse_sse_line`` (bytes → one decoded event) and
``StreamDecoder`` (SGLang's outputs → ``EngineDelta``s), both pure, so recorded
streams can be replayed in unit tests; ``SGLangClient`` only moves bytes and
translates transport errors at the boundary.

A ``/generate`` stream comes in one of two forms, chosen by the engine's launch
flag, never by the request: SGLang's default resends the whole reply so far in
every event (``text``, ``output_ids``: O(n) per event, O(n²) per reply on both
sides), while ``--incremental-streaming-output`` sends only what each event
adds. The client reads which from the engine's ``/get_server_info``
(``incremental_streaming_output``; absent, as before SGLang had the flag:
cumulative) before its first request, and again after it lost the engine (a
restart may change the flag). It does not guess from the chunks: the first
event of both forms looks the same, and a wrong guess would repeat or drop
text. The engine is the one place that knows; a pool setting could disagree
with the flags an engine was launched with. Errors::

    httpx.TransportError / timeout / HTTP 5xx   → EngineUnavailable  (retry elsewhere)
    HTTP 4xx, or an error before the first token → EngineRejected     (SGLang's message)
    error or failed abort after tokens            → last delta, finish_reason "failed"
    finish_reason type abort without a status     → last delta, finish_reason "cancelled"
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, TypeVar

import httpx

from workers.engine_api import (
    EngineDelta,
    EngineLoad,
    EngineRejected,
    EngineUnavailable,
    GenerateRequest,
    ModelInfo,
)

#: ``parse_sse_line`` returns this for ``data: [DONE]``.
DONE = "[DONE]"


def parse_sse_line(line: bytes | str) -> dict[str, Any] | str | None:
    """One line of an SGLang stream: its JSON object, ``DONE``, or None for blank/comment lines."""
    text = line.decode("utf-8") if isinstance(line, bytes) else line
    text = text.strip()
    if not text.startswith("data:"):
        return None  # blank separators, ": ping" comments, "event:" lines SGLang does not send
    data = text[len("data:") :].strip()
    if data == DONE:
        return DONE
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"engine sent a data line that is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ValueError("engine sent a data line that is not a JSON object")
    return obj


def map_finish_reason(reason: Any) -> tuple[str | None, str | None]:
    """SGLang's finish_reason object → (Parley finish_reason, error message)."""
    if reason is None:
        return None, None
    if isinstance(reason, str):  # older SGLang and OpenAI-style strings
        reason = {"type": reason}
    kind = reason.get("type")
    if kind == "stop":
        return "stop", None
    if kind == "length":
        return "length", None
    if kind == "abort":
        if reason.get("status_code") is None:
            return "cancelled", None  # /abort_request, or aborted while queued ("Abort before prefill")
        return "failed", str(reason.get("message") or "aborted by the engine")
    return "failed", f"unknown finish_reason type {kind!r}"


def error_message(body: bytes | str) -> str:
    """The human message in an SGLang error body (``{"error": {"message"}}``, ``{"message"}`` or ``{"detail"}``)."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:500]
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        for key in ("message", "detail"):
            if key in obj:
                return str(obj[key])
    return text.strip()[:500]


class StreamDecoder:
    """Turns an SGLang stream into deltas; raises EngineError only before the first delta.

    ``incremental``: the engine streams each event's own text (``--incremental-streaming-output``),
    else the whole text so far, which is diffed against what came before."""

    def __init__(self, rid: str = "", incremental: bool = False) -> None:
        self.rid = rid
        self.incremental = incremental
        self._text = ""  # cumulative form only: the text so far
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._completion_tokens = 0
        self.started = False  # a delta has been returned: errors now end the stream instead of raising
        self.finished = False
        self.wrong_form = False  # the text was not cumulative: the engine's form is not what was read

    def feed(self, line: bytes | str) -> EngineDelta | None:
        if self.finished:
            return None
        try:
            event = parse_sse_line(line)
        except ValueError as exc:
            return self._fail(str(exc))
        if event is None:
            return None
        if event == DONE:
            return self.end()
        assert isinstance(event, dict)
        if "error" in event:
            message = error_message(json.dumps(event))
            if not self.started:
                self.finished = True
                raise EngineRejected(message)
            return self._fail(message)
        return self._output(event)

    def end(self) -> EngineDelta | None:
        """The stream closed (``[DONE]`` or EOF): a finish reason must have come first."""
        if self.finished:
            return None
        return self._fail("engine stream ended without a finish_reason")

    def lost(self, exc: Exception) -> EngineDelta:
        """The connection broke mid-stream (raises EngineUnavailable if nothing was delivered yet)."""
        return self._fail(f"lost the engine mid-stream: {type(exc).__name__}: {exc}")

    def _output(self, event: dict[str, Any]) -> EngineDelta | None:
        meta = event.get("meta_info") or {}
        self._prompt_tokens = int(meta.get("prompt_tokens") or self._prompt_tokens)
        self._cached_tokens = int(meta.get("cached_tokens") or self._cached_tokens)
        self._completion_tokens = int(meta.get("completion_tokens") or self._completion_tokens)
        raw = meta.get("finish_reason")
        finish, error = map_finish_reason(raw)
        if finish == "failed" and not self.started and isinstance(raw, dict):
            status = raw.get("status_code")
            self.finished = True
            if isinstance(status, int) and 400 <= status < 500:
                raise EngineRejected(error or "refused by the engine")
            raise EngineUnavailable(error or "the engine failed the request")
        text = event.get("text")
        delta = ""
        if isinstance(text, str) and self.incremental:
            delta = text
        elif isinstance(text, str):
            if text.startswith(self._text):
                delta, self._text = text[len(self._text) :], text
            elif finish is None:
                self.wrong_form = True
                return self._fail(
                    "engine text is not cumulative though its /get_server_info says incremental_streaming_output "
                    "is off (was it restarted with --incremental-streaming-output?)"
                )
            # A final text that is not an extension (an abort before prefill sends ""): nothing new.
        if finish is None and not delta:
            return None
        self.started = True
        self.finished = finish is not None
        return EngineDelta(
            text=delta,
            completion_tokens=self._completion_tokens,
            prompt_tokens=self._prompt_tokens,
            cached_tokens=self._cached_tokens,
            finish_reason=finish,
            error=error,
        )

    def _fail(self, message: str) -> EngineDelta:
        """A broken stream: before any delta the request may be retried elsewhere; after, it ends failed."""
        self.finished = True
        if not self.started:
            raise EngineUnavailable(message)
        return EngineDelta(
            text="",
            completion_tokens=self._completion_tokens,
            prompt_tokens=self._prompt_tokens,
            cached_tokens=self._cached_tokens,
            finish_reason="failed",
            error=message,
        )


def decode_stream(lines: Iterable[bytes | str], rid: str = "", incremental: bool = False) -> list[EngineDelta]:
    """All deltas of a recorded stream (the pure path the client runs line by line)."""
    decoder = StreamDecoder(rid, incremental)
    out = [d for d in (decoder.feed(line) for line in lines) if d is not None]
    tail = decoder.end()
    return out + ([tail] if tail is not None else [])


def generate_payload(request: GenerateRequest) -> dict[str, Any]:
    sampling: dict[str, Any] = {
        "max_new_tokens": request.max_new_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
    }
    if request.stop:
        sampling["stop"] = list(request.stop)
    # Sent only when asked for: an engine that does not implement one refuses it by name (HTTP 400).
    if request.seed is not None:
        sampling["sampling_seed"] = request.seed
    if request.presence_penalty:
        sampling["presence_penalty"] = request.presence_penalty
    if request.frequency_penalty:
        sampling["frequency_penalty"] = request.frequency_penalty
    if request.json_schema is not None:
        sampling["json_schema"] = request.json_schema
    if request.structural_tag is not None:
        sampling["structural_tag"] = request.structural_tag
    if request.top_k is not None:
        sampling["top_k"] = request.top_k
    if request.min_p is not None:
        sampling["min_p"] = request.min_p
    if request.repetition_penalty is not None:
        sampling["repetition_penalty"] = request.repetition_penalty
    if request.ignore_eos:
        sampling["ignore_eos"] = True
    if request.stop_token_ids:
        sampling["stop_token_ids"] = list(request.stop_token_ids)
    if request.min_new_tokens:
        sampling["min_new_tokens"] = request.min_new_tokens
    if not request.skip_special_tokens:
        sampling["skip_special_tokens"] = False
    body = {"text": request.text, "sampling_params": sampling, "stream": True, "rid": request.rid}
    if request.priority is not None:
        body["priority"] = request.priority
    return body


class SGLangClient:
    """One engine (an SGLang server or the CPU engine) at ``base_url``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            # No cap on connections: a connection httpcore fails to give back (it happened under chaos,
            # cause not found) must not starve every later request, as the default cap of 100 did.
            # A short pool timeout turns a starved pool into a quick EngineUnavailable, not a 60 s wait.
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            transport=transport,
        )
        self._form: asyncio.Future[bool] | None = None  # the engine's stream form, once read

    async def incremental(self) -> bool:
        """Whether the engine streams incrementally (its ``/get_server_info``), read once per engine
        life: again after a failure that may have been a restart."""
        if self._form is None:
            self._form = asyncio.ensure_future(self._read_form())
            self._form.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(self._form)
        except EngineUnavailable:
            self._forget_form()
            raise

    def _forget_form(self) -> None:
        self._form = None

    async def _read_form(self) -> bool:
        try:
            resp = await self._request("GET", "/get_server_info", allow_404=True)
        except EngineRejected as exc:  # not this request's fault: the engine cannot be used as it is
            raise EngineUnavailable(f"engine at {self.base_url} refused /get_server_info: {exc}") from exc
        if resp.status_code == 404:
            return False  # an SGLang older than /get_server_info streams cumulatively
        info = _json(resp)
        form = info.get("incremental_streaming_output", False) if isinstance(info, dict) else None
        if not isinstance(form, bool):
            raise EngineUnavailable(f"engine at {self.base_url}: incremental_streaming_output is {form!r}, not true or false")
        return form

    async def generate(self, request: GenerateRequest) -> AsyncIterator[EngineDelta]:
        decoder = StreamDecoder(request.rid, await self.incremental())
        try:
            async with self._http.stream("POST", "/generate", json=generate_payload(request)) as resp:
                if resp.status_code >= 400:
                    if resp.status_code >= 500:
                        self._forget_form()
                    _raise_for_status(resp.status_code, await resp.aread(), "/generate")
                # Lines split here, from the bytes: httpx's aiter_lines stacks a text decoder and a
                # line decoder (two more generators) on every network read, the worker's largest
                # cost per token at a hundred streams.
                pending = b""
                async for chunk in resp.aiter_bytes():
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        delta = decoder.feed(line)
                        if decoder.wrong_form:
                            self._forget_form()  # restarted with the other flag: read it again next time
                        if delta is not None:
                            yield delta
                        if decoder.finished:
                            return
                if pending:
                    delta = decoder.feed(pending)
                    if decoder.wrong_form:
                        self._forget_form()
                    if delta is not None:
                        yield delta
                    if decoder.finished:
                        return
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            self._forget_form()  # the engine may come back with other flags
            if not decoder.started:
                raise EngineUnavailable(f"engine at {self.base_url} unreachable: {type(exc).__name__}: {exc}") from exc
            yield decoder.lost(exc)
            return
        tail = decoder.end()
        if tail is not None:
            yield tail

    async def abort(self, rid: str) -> None:
        await self._request("POST", "/abort_request", json={"rid": rid})

    async def load(self) -> EngineLoad:
        resp = await self._request("GET", "/v1/loads", allow_404=True)
        if resp.status_code == 404:  # SGLang before /v1/loads existed
            return parse_get_load(_json(await self._request("GET", "/get_load")))
        return parse_loads(_json(resp))

    async def model_info(self) -> ModelInfo:
        info = _json(await self._request("GET", "/get_model_info"))
        context = info.get("context_length")
        if not context:  # SGLang's /get_model_info lacks it; /v1/models has max_model_len
            models = _json(await self._request("GET", "/v1/models"))
            data = models.get("data") or [{}]
            context = data[0].get("max_model_len") or 0
        return ModelInfo(model=str(info.get("model_path", "")), context_length=int(context), untrained=bool(info.get("untrained", False)))

    async def health(self) -> bool:
        try:
            resp = await _uncancelled(self._http.get("/health"))
        except (httpx.TransportError, httpx.TimeoutException):
            self._forget_form()
            return False
        if resp.status_code != 200:
            self._forget_form()
        return resp.status_code == 200

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, *, json: Any = None, allow_404: bool = False) -> httpx.Response:
        try:
            resp = await _uncancelled(self._http.request(method, path, json=json))
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise EngineUnavailable(f"engine at {self.base_url} unreachable: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400 and not (allow_404 and resp.status_code == 404):
            _raise_for_status(resp.status_code, resp.content, path)
        return resp


T = TypeVar("T")


async def _uncancelled(call: Awaitable[T]) -> T:
    """``call``, finished even if our caller is cancelled (a timeout around a probe, say).

    httpcore leaves a connection ACTIVE in the pool when a request is cancelled
    while it is being sent; a worker whose heartbeat times out its load probe
    every few seconds ran out of connections (100) within minutes and then
    could not reach its engine at all. Shielded, the request runs to its end
    (bounded by the client's own timeouts) and gives its connection back.
    """
    task = asyncio.ensure_future(call)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # an orphaned probe's error is not worth a warning at shutdown


def parse_loads(body: dict[str, Any]) -> EngineLoad:
    """SGLang's ``/v1/loads``: one entry per data-parallel rank, summed (usage and hit rate averaged)."""
    ranks = body.get("loads") or []
    if not ranks:
        return EngineLoad(running=0, queued=0, max_running=0, kv_usage=0.0, cache_hit_rate=0.0)
    n = len(ranks)
    return EngineLoad(
        running=sum(int(r.get("num_running_reqs", 0)) for r in ranks),
        queued=sum(int(r.get("num_waiting_reqs", 0)) for r in ranks),
        max_running=sum(int(r.get("max_running_requests", 0)) for r in ranks),
        kv_usage=sum(float(r.get("token_usage", 0.0)) for r in ranks) / n,
        cache_hit_rate=sum(float(r.get("cache_hit_rate", 0.0)) for r in ranks) / n,
    )


def parse_get_load(body: Any) -> EngineLoad:
    """Older SGLang's ``/get_load``: a list of per-rank counts, or ``{"load": n}``; no usage figures."""
    if isinstance(body, dict):
        return EngineLoad(running=int(body.get("load", 0)), queued=0, max_running=0, kv_usage=0.0, cache_hit_rate=0.0)
    return EngineLoad(
        running=sum(int(r.get("num_reqs", 0)) for r in body),
        queued=sum(int(r.get("num_waiting_reqs", 0)) for r in body),
        max_running=0,
        kv_usage=0.0,
        cache_hit_rate=0.0,
    )


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise EngineUnavailable(f"engine answered {resp.request.url.path} with non-JSON: {exc}") from exc


def _raise_for_status(status: int, body: bytes, path: str) -> None:
    message = error_message(body)
    if status >= 500:
        raise EngineUnavailable(f"engine answered {path} with HTTP {status}: {message}")
    raise EngineRejected(message or f"engine answered {path} with HTTP {status}")
