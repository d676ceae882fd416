"""Errors as the API returns them: JSON ``{"error": {"code", "message"}}`` with the right status.

Handlers raise ``ApiError`` (or a subclass); the app's exception handlers turn
it, and anything unexpected, into that shape. Nothing internal leaks to clients.
"""

from __future__ import annotations

from starlette.responses import JSONResponse


class ApiError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.code
        self.status = status or self.status
        self.retry_after = retry_after

    def response(self) -> JSONResponse:
        body: dict = {"error": {"code": self.code, "message": self.message}}
        headers = {}
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


class NotFound(ApiError):
    status, code = 404, "not_found"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class Unprocessable(ApiError):
    status, code = 422, "invalid"


class ServiceUnavailable(ApiError):
    status, code = 503, "unavailable"
