"""A client that hangs up while its body is read is not a server error (it was logged as one, a 500)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.app import EXCEPTION_HANDLERS
from gateway.validation import json_body


async def _post(request: Request) -> Response:
    return JSONResponse(await json_body(request, 1000))


def _call(app: Starlette, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": "POST", "path": "/", "raw_path": b"/", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"20")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "scheme": "http", "http_version": "1.1",
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent


def test_a_client_gone_mid_body_is_a_499_and_no_unhandled_error(caplog: pytest.LogCaptureFixture) -> None:
    app = Starlette(routes=[Route("/", _post, methods=["POST"])], exception_handlers=EXCEPTION_HANDLERS)
    with caplog.at_level(logging.INFO):
        sent = _call(app, [{"type": "http.request", "body": b'{"a": ', "more_body": True}, {"type": "http.disconnect"}])
    assert sent[0]["status"] == 499
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_whole_body_is_still_answered() -> None:
    app = Starlette(routes=[Route("/", _post, methods=["POST"])], exception_handlers=EXCEPTION_HANDLERS)
    sent = _call(app, [{"type": "http.request", "body": b'{"a": 1}', "more_body": False}])
    assert sent[0]["status"] == 200
