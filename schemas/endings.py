"""How a turn ends when no worker ends it, and every ``error_code`` a turn can end with.

A turn's end is two events in one order, whoever writes them: the
GenerationCompleted first (the log: the materializer, the next turn's prompt,
recovery lookups), then the final TokenChunk (the client's SSE ``done`` or
``error``). A client that sees its stream end and posts again must find the
outcome on ``chat.events`` (DESIGN.md §1); workers keep the same order in their
transactions (workers/scheduler.py).
"""

from __future__ import annotations

from schemas.events import GenerationCompleted, GenerationRequested, InferenceRequested, TokenChunk

# ------------------------------------------------------------------ error codes (TokenChunk / GenerationCompleted)

#: The router: a model no pool serves.
UNKNOWN_MODEL = "unknown_model"
#: The router: prompt + max_tokens that no configured pool holds. The context builder: a prompt no Kafka record
#: holds even with its history left out (an as-sent history, one enormous message), which no consumer would read.
CONTEXT_TOO_LONG = "context_too_long"
#: The router: a shed turn (it carries ``retry_after``).
OVERLOADED = "overloaded"
#: The context builder: the message being answered is not in the conversation's history.
CONTEXT_UNAVAILABLE = "context_unavailable"
#: Workers (workers/outcome.py): the engine could not be reached, refused, failed, or broke the protocol.
ENGINE_UNAVAILABLE = "engine_unavailable"
ENGINE_REJECTED = "engine_rejected"
ENGINE_ERROR = "engine_error"
ENGINE_FAILED = "engine_failed"
ENGINE_PROTOCOL = "engine_protocol"
#: Workers: a bug of the worker's own.
WORKER_ERROR = "worker_error"
#: Workers: a request taken over from a lost worker whose earlier output could not be read (workers/recovery.py).
HISTORY_UNAVAILABLE = "history_unavailable"

#: What a client is told for the codes whose ``error_message`` comes from an engine or a worker's own failure:
#: those name engine addresses and quote engine bodies, which stay in the log and the worker's log lines.
#: The other codes' messages are Parley's own words for the client (a model not served, a prompt too long),
#: and ENGINE_REJECTED's is the engine's 4xx reason about the client's own request (which option to change),
#: without the engine's address (workers/sglang.py puts none in it).
CLIENT_MESSAGES = {
    ENGINE_UNAVAILABLE: "the model server could not be reached; try again shortly",
    ENGINE_ERROR: "the model server answered with an error",
    ENGINE_FAILED: "the model server failed the generation",
    ENGINE_PROTOCOL: "the model server's answer could not be read",
    WORKER_ERROR: "the generation failed",
}


def client_message(code: str | None, message: str | None, finish_reason: str) -> str:
    """The message a client gets for a turn that ended ``code``: never an engine's own words."""
    return CLIENT_MESSAGES.get(code or "") or message or f"the generation {finish_reason}"


#: What a reply cut or withdrawn by moderation shows instead of its text (GenerationCompleted.content of a
#: content_filter ending, and the stored message once GenerationModerated lands): the flagged text is
#: not kept on chat.events or in the messages table.
FILTERED_NOTICE = "This reply was withheld because it was flagged by content moderation."


def ending(
    request: InferenceRequested | GenerationRequested,
    finish_reason: str,
    code: str,
    message: str,
    *,
    retry_after: float | None = None,
    pool: str = "",
    model: str = "",
) -> list[GenerationCompleted | TokenChunk]:
    """The events that end ``request``'s turn without a generation, in their order."""
    completed = _completed(
        request, finish_reason=finish_reason, pool=pool, model=model, error_code=code, error_message=message
    )
    return [completed, final_chunk(completed, retry_after)]


def filtered(request: InferenceRequested | GenerationRequested) -> list[GenerationCompleted | TokenChunk]:
    """The events that end ``request``'s turn when moderation stops it before any generation (a strict policy)."""
    completed = _completed(request, finish_reason="content_filter", content=FILTERED_NOTICE)
    return [completed, final_chunk(completed, None)]


def _completed(request: InferenceRequested | GenerationRequested, **fields: object) -> GenerationCompleted:
    return GenerationCompleted(
        conversation_id=request.conversation_id,
        user_id=request.user_id,
        trace_id=request.trace_id,
        request_id=request.request_id,
        parent_id=request.parent_id,
        attempt=getattr(request, "attempt", 0),
        **fields,  # type: ignore[arg-type]
    )


def final_chunk(completed: GenerationCompleted, retry_after: float | None) -> TokenChunk:
    """The TokenChunk that ends the client's stream of a turn ``completed`` ended (no text of its own)."""
    return TokenChunk(
        conversation_id=completed.conversation_id,
        user_id=completed.user_id,
        trace_id=completed.trace_id,
        request_id=completed.request_id,
        attempt=completed.attempt,
        seq=0,
        finish_reason=completed.finish_reason,
        model=completed.model,
        error_code=completed.error_code,
        error_message=completed.error_message,
        retry_after=retry_after,
    )
