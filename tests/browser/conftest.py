"""The web client in a real headless Chromium against the whole real stack.

The stack is tools/isolated.py's (every service a process, on this run's own
topics and keyspace), started once for the package. Two engines serve it:

* the ``small`` pool: a synthetic engine slow enough that a reply takes several
  seconds, so a test can stop it or reload the page while it streams. Every
  "auto" turn goes there (the classifier's thresholds are out of reach);
* the ``medium`` pool: the CPU engine's real model, SmolLM2-135M-Instruct, for
  the tests that need readable English (test_real_model.py, which asks for
  temperature 0). The page reaches it by choosing the model by name. The titler
  names chats with it too, as it would with a small pool of SmolLM2.

The operator's tools file (PARLEY_TOOLS_FILE) names one tool, ``add_expense``, served by a local HTTP service
of the session (tests/e2e/tool_service.py's, as the e2e stack's) that counts its effects; no rule names it, so the permission broker asks the
owner about every call (``no-rule``) and each call waits for the page (test_tools_page.py).

Chromium comes from Debian (infra/local/debian-packages.sh); Playwright only drives it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.accounts import create_account
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tests.e2e.tool_service import SCHEMA, Effects, serve
from tools.topology import SERVICES, TITLER, WORKER_FRONTIER, WORKER_MEDIUM

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / ".data" / "screenshots"

#: What the synthetic engine below names itself at /get_model_info (workers/engine/synthetic.py).
SYNTHETIC_MODEL = "parley-synthetic-20tps-100ms"
#: What the CPU engine's torch backend serves by default (workers/engine/packaged_model.py).
REAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

#: ~150 tokens at 20 tokens/s: each synthetic reply streams for about seven and a half seconds, long enough to
#: stop it, reload mid-reply in two tabs or kill its worker (it was 15: ten seconds a reply, the suite's budget).
BROWSER_ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "100",
    "PARLEY_ENGINE_TOKENS_PER_S": "20",
    "PARLEY_CONTEXT_MAX_TOKENS": "150",
    "PARLEY_ROUTER_POOLS": f"small={SYNTHETIC_MODEL},medium={REAL_MODEL}",
    # "auto" always means small: no turn of a test lands on the real model unless it asks for it.
    "PARLEY_ROUTER_MEDIUM_SCORE": "100",
    "PARLEY_ROUTER_FRONTIER_SCORE": "100",
    "PARLEY_ROUTER_CAPABILITIES": "small=chat+code+math,medium=chat+code+math",
    # A killed worker's partitions move within seconds (test_worker_restart.py).
    "PARLEY_WORKER_SESSION_TIMEOUT_MS": "6000",
    # Every test signs in from 127.0.0.1, some with a wrong password on purpose: the address's limit is out of
    # reach (good sign-ins give their attempt back; the wrong ones stay counted for the window).
    "PARLEY_SESSION_SIGNIN_PER_ADDRESS": "10000",
    "PARLEY_DOCUMENTS_EMBEDDER_WARM": "true",  # test_documents searches them (tools/isolated.py defers it)
}
#: The real model's engine, over BROWSER_ENV.
REAL_ENGINE_ENV = {"PARLEY_ENGINE_BACKEND": "torch"}
#: Started with the stack; the medium worker and the titler are started after it, on the real model's engine,
#: and frontier is not used.
STACK_SERVICES = tuple(s for s in SERVICES if s not in (WORKER_MEDIUM, WORKER_FRONTIER, TITLER))

#: Generous: a reply takes ~8 s, more on a loaded two-core machine.
WAIT_MS = 90_000

#: The operator's one tool here: not read-only and named by no rule, so every call of it is asked (``no-rule``).
TOOL = "add_expense"


def tools_file(service: Effects, path: Path) -> Path:
    """The operator's tools file naming the service's idempotent tool, written at ``path``."""
    tool = {"name": TOOL, "url": f"{service.url}/expense", "parameters": SCHEMA, "description": "Record an expense"}
    path.write_text(json.dumps({"tools": [tool]}))
    return path


# Session scope, started before the stack: the stack's tool executor calls it.
@pytest.fixture(scope="session")
def tool_service() -> Iterator[Effects]:
    server = serve()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class Account:
    """What a person types into the page's sign-in form."""

    email: str
    password: str


class WebStack:
    """The running stack, a user with a password account (what the page signs in with) and an API key (what
    ``http``, the test's own client of the API as that user, sends)."""

    def __init__(self, inner: isolated.IsolatedStack, real_engine_url: str) -> None:
        self.inner = inner
        self.url = inner.url
        self.real_engine_url = real_engine_url
        self.user_id, self.api_key = inner.create_user("browser-user", "plus")
        self.account = self.add_account(self.user_id, "browser-user@example.com")
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=30)

    def add_account(self, user_id: str, email: str) -> Account:
        """A password account for ``user_id``."""
        password = f"the password of {user_id}"
        create_account(self.inner.session, user_id, email, password)  # type: ignore[arg-type]
        return Account(email, password)

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        response = self.http.get(f"/v1/conversations/{conversation_id}")
        response.raise_for_status()
        return response.json()

    def settled(self, conversation_id: str, reply_id: str, timeout: float = 60) -> dict[str, Any]:
        """The stored reply once it has finished."""
        deadline = time.monotonic() + timeout
        while True:
            reply = next((m for m in self.conversation(conversation_id)["messages"] if m["id"] == reply_id), None)
            if reply is not None and reply["status"] not in (None, "streaming"):
                return reply
            if time.monotonic() > deadline:
                raise AssertionError(f"reply {reply_id} still not finished after {timeout} s: {reply}")
            time.sleep(0.2)


def served_model(engine_url: str) -> str:
    return str(httpx.get(f"{engine_url}/get_model_info", timeout=10).json()["model_path"])


# Package scope: one stack for every module here (its start is most of the suite's fixed cost).
@pytest.fixture(scope="package")
def web_stack(infra, tool_service: Effects, tmp_path_factory) -> Iterator[WebStack]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "web")
    tools = tools_file(tool_service, tmp_path_factory.mktemp("web-tools") / "tools.json")
    env = {**BROWSER_ENV, "PARLEY_TOOLS_FILE": str(tools)}
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("web-stack-logs"), env, STACK_SERVICES)
    stack = None
    try:
        engine, _ = isolated.add_worker(inner, WORKER_MEDIUM, "worker-medium", engine_env=REAL_ENGINE_ENV)
        assert engine.health_url, "the engine is found by its health address"
        stack = WebStack(inner, engine.health_url.removesuffix("/health"))
        titler = inner.supervisor.start(TITLER, extra_env={"PARLEY_TITLER_ENGINE_URL": stack.real_engine_url})
        inner.supervisor.wait_ready(titler)
        # The router maps a chosen model to its pool by these names: they must be what the engines say.
        assert served_model(inner.engine_url) == SYNTHETIC_MODEL, "the synthetic engine renamed itself: fix SYNTHETIC_MODEL"
        assert served_model(stack.real_engine_url) == REAL_MODEL, "the CPU engine serves another model: fix REAL_MODEL"
        yield stack
    finally:
        if stack is not None:
            stack.http.close()
        inner.stop()
        isolated.drop(kafka, cassandra)


# Module scope, not session: Playwright's sync API runs an event loop on this thread for as
# long as it is open, and the asyncio tests of later modules need the thread's loop back.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash infra/local/debian-packages.sh` (installs Debian's chromium)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def new_context(browser: Any) -> Any:
    """A fresh browser profile, sized and timed as every test's."""
    ctx = browser.new_context(viewport={"width": 1200, "height": 800})
    ctx.set_default_timeout(WAIT_MS)
    return ctx


@pytest.fixture
def context(browser) -> Iterator[Any]:
    """A fresh profile per test: nothing in localStorage or sessionStorage."""
    ctx = new_context(browser)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context) -> Any:
    return context.new_page()


@pytest.fixture
def shoot() -> Callable[[Any, str], None]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page: Any, name: str) -> None:
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))

    return take
