"""`POST /v1/moderations` in OpenAI's shape, so clients that moderate through the OpenAI API work unchanged.

The classifier is the one the moderation processor runs (``PARLEY_MODERATION_*``,
loaded on the first call), under the caller's tier policy: ``categories[c]`` is
whether ``c`` reached its threshold, ``flagged`` whether any category the
policy blocks did. The response names the model that actually scored the text
(OpenAI's model names are accepted as asking for it). Text only: an image part
is refused by name, as is any field OpenAI's endpoint does not have.

Errors are OpenAI's shape (``gateway.errors.openai_response``), as on
``/v1/chat/completions``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import ApiError, BadRequest, PayloadTooLarge, ServiceUnavailable, openai_response
from gateway.services import services
from gateway.validation import json_body
from moderation.categories import CATEGORIES
from moderation.classifier import Classifier, ClassifierUnavailable, classifier_from
from moderation.policy import Policy, policy_from
from moderation.settings import ModerationSettings
from parley.settings import from_env

log = logging.getLogger(__name__)

#: OpenAI's moderation models: a client that names one gets this gateway's classifier (named in the response).
OPENAI_MODELS = frozenset({"omni-moderation-latest", "omni-moderation-2024-09-26", "text-moderation-latest", "text-moderation-stable"})
FIELDS = frozenset({"input", "model"})
#: Most texts one request may carry, and characters per text (OpenAI documents no limit; the body cap holds too).
MAX_INPUTS = 32
MAX_CHARS = 32_000


class Moderations:
    """The classifier and policy, loaded once on first use (the local model takes a moment)."""

    def __init__(self) -> None:
        self._loaded: tuple[Classifier, Policy] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> tuple[Classifier, Policy]:
        async with self._lock:
            if self._loaded is None:
                cfg = from_env(ModerationSettings)
                classifier = await asyncio.to_thread(classifier_from, cfg)
                self._loaded = (classifier, policy_from(cfg.policy))
            return self._loaded


async def create_moderation(request: Request) -> Response:
    try:
        return await _moderate(request)
    except ApiError as exc:
        return openai_response(exc)


async def _moderate(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadRequest(f"`{unknown[0]}` is not a parameter of /v1/moderations", code="unknown_parameter")
    texts = _texts(body.get("input"))
    classifier, policy = await request.app.state.moderations.get()
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or (model not in OPENAI_MODELS and model != classifier.model)):
        raise BadRequest(
            f"model {model!r} is not served here; this gateway moderates with {classifier.model!r} "
            f"(OpenAI's names {sorted(OPENAI_MODELS)} ask for it too)",
            code="model_not_found",
        )
    tier = policy.for_tier(user.tier)
    # Each call is a request of the minute, as a generation is: the classifier's CPU is not free.
    await svc.quotas.check(user, f"moderation-{uuid.uuid4()}")
    try:
        scored = await classifier.classify(texts)
    except ClassifierUnavailable as exc:
        # The classifier's own words name its engine (and may quote its body): the client gets none of them.
        log.warning("moderation classifier unavailable", extra={"classifier": classifier.model, "error": type(exc).__name__})
        raise ServiceUnavailable("moderation is unavailable right now", code="moderation_unavailable", retry_after=svc.settings.retry_after_s) from None
    results = []
    for scores in scored:
        blocked = set(tier.flags(scores))
        reached = set(scores.over(tier.thresholds, tier.default_threshold))
        results.append(
            {
                "flagged": bool(blocked),
                "categories": {c: c in reached for c in CATEGORIES},
                "category_scores": {c: round(scores.values.get(c, 0.0), 6) for c in CATEGORIES},
                "category_applied_input_types": {c: ["text"] for c in CATEGORIES},
            }
        )
    return JSONResponse({"id": f"modr-{uuid.uuid4().hex}", "model": classifier.model, "results": results})


def _texts(value: Any) -> list[str]:
    """OpenAI's ``input``: a string, a list of strings, or a list of ``{"type": "text", "text": …}`` parts."""
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and value:
        texts = [_part(item) for item in value]
    else:
        raise BadRequest("`input` must be a string, a list of strings, or a list of text parts", code="invalid_input")
    if len(texts) > MAX_INPUTS:
        raise PayloadTooLarge(f"at most {MAX_INPUTS} inputs per request")
    if any(len(t) > MAX_CHARS for t in texts):
        raise PayloadTooLarge(f"each input may be at most {MAX_CHARS} characters")
    return texts


def _part(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
        return item["text"]
    if isinstance(item, dict) and item.get("type") == "image_url":
        raise BadRequest("image inputs are not supported: this gateway moderates text only", code="unsupported_input_type")
    raise BadRequest("each input must be a string or {\"type\": \"text\", \"text\": …}", code="invalid_input")
