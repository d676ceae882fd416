"""The HTTP tool runner (workers/tool_runners.py) against a real local server: the call id as Idempotency-Key,
and the three ways a call can end (answered, surely not sent, maybe sent)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from parley.tool_registry import ToolSpec
from workers.tool_runners import HttpTool, NotSent, OutcomeUnknown


class _Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, self.headers.get("Idempotency-Key", ""), body))
        if self.path == "/slow":
            time.sleep(1.0)
        status = 500 if self.path == "/broken" else 200
        self.send_response(status)
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"answer!")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def tool(url: str, timeout_s: float = 5.0) -> HttpTool:
    return HttpTool(ToolSpec("t", "", {"type": "object"}, "http", url, timeout_s=timeout_s))


async def test_the_call_id_is_the_idempotency_key_and_a_2xx_is_ok(server: str) -> None:
    result = await tool(f"{server}/ok").run({"amount": 3}, "call_abc")
    assert (result.outcome, result.text) == ("ok", "answer!")
    assert ("/ok", "call_abc", b'{"amount": 3}') in _Handler.seen


async def test_an_error_status_is_an_error_naming_it(server: str) -> None:
    result = await tool(f"{server}/broken").run({}, "call_x")
    assert result.outcome == "error" and "500" in result.error


async def test_a_refused_connection_was_surely_not_sent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(NotSent):
        await tool(f"http://127.0.0.1:{port}/x").run({}, "call_y")


async def test_no_answer_in_time_may_have_taken_effect(server: str) -> None:
    with pytest.raises(OutcomeUnknown):
        await tool(f"{server}/slow", timeout_s=0.2).run({}, "call_z")
