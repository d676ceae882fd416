"""The side-effecting tools the e2e stack offers (DESIGN.md §13): a local HTTP service counting effects per
idempotency key, and the operator's tools file that points at it. The shared stack (conftest.py) starts one;
tests/e2e/test_tools.py drives it.

/expense honours Idempotency-Key like a payment API (a repeated key gets the first answer, no second effect);
/charge does not: every request is an effect, so a call run twice shows as two. Each answer scripts the
model's next reply (the synthetic engine's ``[[reply:…]]``), so a turn ends after one round.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def scripted(text: str) -> str:
    return f"[[reply:{base64.b64encode(text.encode()).decode()}]]"


def calls(*calls: tuple[str, dict[str, Any]]) -> str:
    """A user message whose reply is the model calling ``calls`` (Hermes markup, the synthetic pool's)."""
    return scripted("".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>\n' for n, a in calls))


class Effects(ThreadingHTTPServer):
    """The side-effecting service. /expense honours Idempotency-Key (a repeated key gets the first answer and no
    second effect); /charge does not: every request is an effect, so a call run twice shows as two."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.effects: Counter[str] = Counter()  # key → effects
        self.requests: Counter[str] = Counter()  # path → requests
        self.asked: Counter[str] = Counter()  # key → requests
        self.bodies: dict[str, dict[str, Any]] = {}
        self.answers: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.hold_item = ""  # a request for this item takes effect, then waits for release before answering
        self.held = threading.Event()
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Effects

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        key = self.headers.get("Idempotency-Key", "")
        s = self.server
        with s.lock:
            s.requests[self.path] += 1
            s.asked[key] += 1
            answer = s.answers.get(key) if self.path == "/expense" else None  # charge_card takes every request
            if answer is None:
                s.effects[key] += 1
                s.bodies[key] = body
                final = f"Saved {body.get('item')} for {body.get('amount')}."
                answer = json.dumps({"ok": True, "note": scripted(final)}).encode()
                s.answers[key] = answer
        if s.hold_item and body.get("item") == s.hold_item and not s.release.is_set():
            s.held.set()
            s.release.wait(120)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["amount", "item"],
}


def tools_config(effects: Effects) -> dict[str, Any]:
    """The operator's file: the three tools, every fetch_url call asked (the API tests' waiting call), the
    built-ins over the user's own data (no rule names them: search is read-only and allowed, memory asked), and
    loopback opened to the SSRF guard, where the tests' organisations run their MCP servers."""
    return {
        "tools": [
            {"name": "add_expense", "url": f"{effects.url}/expense", "idempotent": True, "parameters": SCHEMA,
             "description": "Record an expense"},
            {"name": "charge_card", "url": f"{effects.url}/charge", "parameters": SCHEMA, "description": "Charge a card"},
            {"name": "delete_everything", "url": f"{effects.url}/delete", "description": "Delete all records"},
        ],
        "rules": [
            {"name": "small-expenses", "effect": "allow", "tool": "add_expense", "arguments": {"amount": {"regex": "[0-9]{1,2}"}}},
            {"name": "cards", "effect": "allow", "tool": "charge_card"},
            {"name": "no-deletes", "effect": "deny", "tool": "delete_everything"},
            {"name": "ask-fetch", "effect": "ask", "tool": "fetch_url"},
        ],
        "builtins": ["search_documents", "remember", "forget"],
        # The organisations' MCP servers of the tests run on this machine (the SSRF guard's exception).
        "fetch": {"allow_networks": ["127.0.0.0/8"]},
    }


def serve() -> Effects:
    server = Effects()
    threading.Thread(target=server.serve_forever, daemon=True, name="e2e-tools").start()
    return server
