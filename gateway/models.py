"""``GET /v1/models`` and ``GET /v1/models/{id}``: what the pools serve, in OpenAI's shape.

Every chat front end asks for the list first. The models are those the
router's pools are configured with (``PARLEY_ROUTER_POOLS``, which must name
what their engines serve: the router warns when a worker's heartbeat says
otherwise), each once, with the pools that serve it, plus ``auto`` (the router
chooses). Errors are OpenAI's shape, as on ``/v1/chat/completions``.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import ApiError, NotFound, Unprocessable, openai_response
from gateway.services import services
from gateway.validation import MISSING
from streams.router import AUTO

#: Shown as every model's ``created``: when this gateway started (no model here has a release date to tell).
STARTED = int(time.time())


def chosen_model(request: Request, value: Any) -> str | None:
    """A native request's ``model`` (a string field, checked): a pool, a pool's model, or ``auto``/absent (None,
    the router's choice); 422 ``unknown_model`` naming the choices for any other, before anything is appended
    (the router would only fail the turn)."""
    if value is MISSING or value is None or value.strip().lower() in AUTO:
        return None
    policy = request.app.state.router_policy
    if policy.pool_of_model(value.strip()) is None:
        served = ", ".join(sorted({p.model for p in policy.pools.values()} | set(policy.pools)))
        raise Unprocessable(f"`model` names no model served here; choose one of: auto, {served}", code="unknown_model")
    return str(value.strip())


def model_list(policy: Any) -> list[dict[str, Any]]:
    """``auto`` first, then each served model once with its pools, cheapest pool first."""
    pools: dict[str, list[str]] = {}
    for pool in policy.pools.values():
        pools.setdefault(pool.model, []).append(pool.name)
    auto = {"id": "auto", "object": "model", "created": STARTED, "owned_by": "parley", "pools": list(policy.pools)}
    return [auto] + [
        {"id": model, "object": "model", "created": STARTED, "owned_by": "parley", "pools": names}
        for model, names in pools.items()
    ]


async def list_models(request: Request) -> Response:
    svc = services(request)
    try:
        await svc.auth(request)
    except ApiError as exc:
        return openai_response(exc)
    return JSONResponse({"object": "list", "data": model_list(request.app.state.router_policy)})


async def get_model(request: Request) -> Response:
    svc = services(request)
    wanted = request.path_params["model_id"]
    try:
        await svc.auth(request)
        found = next((m for m in model_list(request.app.state.router_policy) if m["id"] == wanted), None)
        if found is None:
            error = NotFound(f"the model `{wanted}` does not exist here", code="model_not_found")
            error.param = "model"
            raise error
    except ApiError as exc:
        return openai_response(exc)
    return JSONResponse(found)
