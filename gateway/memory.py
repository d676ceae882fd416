"""User memory: `GET/PUT/DELETE /v1/memory`. Facts are rendered into prompts in the order given."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import PayloadTooLarge, Unprocessable
from gateway.services import services, trace_id
from gateway.validation import json_body
from schemas import sealing
from schemas.events import MemoryUpdated
from streams.memory import MAX_FACT_CHARS, MAX_FACTS, fact


async def get_memory(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    return JSONResponse({"facts": await svc.store.memory(user.user_id)})


async def put_memory(request: Request) -> Response:
    """Replace the memory with ``{"facts": ["…", …]}``."""
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    texts = body.get("facts")
    if not isinstance(texts, list) or not all(isinstance(t, str) and t.strip() for t in texts):
        raise Unprocessable("`facts` must be a list of non-empty strings")
    if len(texts) > MAX_FACTS or any(len(t) > MAX_FACT_CHARS for t in texts):
        raise PayloadTooLarge(f"at most {MAX_FACTS} facts of {MAX_FACT_CHARS} characters each")
    texts = list(dict.fromkeys(t.strip() for t in texts))  # a repeated fact once, first place kept
    return await _replace(request, user.user_id, texts)


async def delete_memory(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    return await _replace(request, user.user_id, [])


async def _replace(request: Request, user_id: str, texts: list[str]) -> Response:
    svc = services(request)
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise Unprocessable("a fact is not valid Unicode text") from None
    event = MemoryUpdated(user_id=user_id, facts=[fact(user_id, t, sealing.sealer()) for t in texts], trace_id=trace_id(request))
    await svc.append(event)
    await svc.store.write_memory(event)
    return JSONResponse({"facts": [{"id": f.fact_id, "text": f.text} for f in event.facts]})
