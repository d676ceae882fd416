"""Errors as the API returns them: JSON ``{"error": {"code", "message"}}`` with the right status.

Handlers raise ``ApiError`` (or a subclass); the app's exception handlers turn
it, and anything unexpected, into that shape. Nothing internal leaks to clients.
"""

from __future__ import annotations

import json

from starlette.responses import JSONResponse


class ApiError(Exception):
    status = 400
    code = "bad_request"
    #: The request field at fault, where one is (only OpenAI's error shape says it: ``openai_response``).
    param: str | None = None

    def __init__(
        self, message: str, *, code: str | None = None, status: int | None = None, retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.code
        self.status = status or self.status
        self.retry_after = retry_after
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body: dict = {"error": {"code": self.code, "message": self.message}}
        headers = dict(self.headers)
        if self.retry_after is not None:
            body["error"]["retry_after"] = self.retry_after
            headers["Retry-After"] = str(max(1, round(self.retry_after)))
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(body, status_code=self.status, headers=headers)


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class Conflict(ApiError):
    status, code = 409, "conflict"


class NotFound(ApiError):
    status, code = 404, "not_found"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class Misdirected(ApiError):
    """421: the caller's data lives in another region (``Parley-Home-Region`` says which)."""

    status, code = 421, "wrong_region"


class Unprocessable(ApiError):
    status, code = 422, "invalid"


class ServiceUnavailable(ApiError):
    status, code = 503, "unavailable"


#: OpenAI's error ``type`` by status; 5xx are ``server_error``.
OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_response(exc: ApiError) -> JSONResponse:
    """``exc`` in OpenAI's shape, for ``POST /v1/chat/completions`` only (gateway/openai_compat.py).

    ``{"error": {"message", "type", "param", "code", …}}``: the same status, headers (Retry-After,
    WWW-Authenticate) and extra fields (a quota's ``limit``, ``reset_at``…) as Parley's own shape,
    with OpenAI's ``type`` and ``param`` added, so OpenAI clients raise their usual exceptions.
    """
    parley = exc.response()
    error = dict(json.loads(bytes(parley.body))["error"])
    kind = OPENAI_TYPES.get(exc.status, "server_error" if exc.status >= 500 else "invalid_request_error")
    body = {"message": error.pop("message"), "type": kind, "param": exc.param, "code": error.pop("code"), **error}
    headers = {k: v for k, v in parley.headers.items() if k.lower() not in ("content-length", "content-type")}
    return JSONResponse({"error": body}, status_code=parley.status_code, headers=headers)
