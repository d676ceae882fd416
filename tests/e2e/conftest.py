"""The whole stack as real processes (engine, worker, processors, gateway) on this run's
topics and keyspace, started once for the e2e tests (tools/isolated.py)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import httpx
import pytest

from parley.accounts import create_account
from parley.settings import CassandraSettings, KafkaSettings, from_env
from tests.e2e import tool_service
from tools import isolated
from tools.client import SESSION_COOKIE, ParleyClient

#: A quick synthetic engine and short replies keep the suite fast on two cores.
E2E_ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "20",
    "PARLEY_ENGINE_TOKENS_PER_S": "400",
    "PARLEY_CONTEXT_MAX_TOKENS": "40",
    # Two test processes share two cores: a question's document search gets more than its 2 s of production,
    # so test_documents sees the hybrid path it checks, not a keyword-only fallback of a busy machine.
    "PARLEY_DOCUMENTS_SEARCH_TIMEOUT_S": "10",
}
#: The shared stack answers test_documents' questions: its embedding model loads at start (tools/isolated.py defers it).
SEARCHES_DOCUMENTS = {"PARLEY_DOCUMENTS_EMBEDDER_WARM": "true"}


#: The longest one reply may take on the shared stack: a few seconds normally, on a busy two-core machine far less
#: than this; past it the reply is lost, and the test says so.
REPLY_DEADLINE_S = 150.0


class Stack:
    def __init__(self, inner: isolated.IsolatedStack, effects: tool_service.Effects | None = None) -> None:
        self.inner = inner
        self.effects = effects  # the tools' service (tool_service.py), on the shared stack
        self.url = inner.url
        self.kafka = inner.kafka
        self.cassandra = inner.cassandra
        self.user_id, self.key = inner.create_user("e2e-user", "plus")

    def client(self, key: str | None = None) -> ParleyClient:
        # A reply that never ends fails its test with what it streamed, never hangs it to pytest's timeout.
        return ParleyClient(self.url, key or self.key, reply_deadline_s=REPLY_DEADLINE_S)

    def new_key(self, tier: str = "free") -> str:
        return self.inner.create_user("another", tier)[1]

    def sign_in(self, user_id: str) -> tuple[str, str]:
        """(session id, CSRF token) of a web session of ``user_id``: a password account made for it, signed in
        as the page does (POST /v1/auth/sign-in from the gateway's own origin)."""
        return sign_in(self.inner.session, self.url, user_id)

    def web_client(self, user_id: str) -> ParleyClient:
        """A client on ``user_id``'s web session: the scopes a key lacks (its keys, erasure, administration)."""
        return ParleyClient(self.url, "", reply_deadline_s=REPLY_DEADLINE_S, session=self.sign_in(user_id))


def sign_in(cassandra: object, url: str, user_id: str) -> tuple[str, str]:
    email, password = f"{user_id}@e2e.parley.test", secrets.token_urlsafe(12)
    create_account(cassandra, user_id, email, password)  # type: ignore[arg-type]
    response = httpx.post(f"{url}/v1/auth/sign-in", json={"email": email, "password": password}, headers={"Origin": url}, timeout=60)
    response.raise_for_status()
    return response.cookies[SESSION_COOKIE], str(response.json()["csrf_token"])


@pytest.fixture(scope="session")
def stack(infra, tmp_path_factory) -> Iterator[Stack]:
    """Its own topics and keyspace, so its traffic never meets the integration tests'."""
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "e2e")
    # The operator's tools: a side-effecting service of this process's (test_tools), and every call of the
    # built-in fetch_url asked, so the API tests find a call waiting for its answer.
    effects = tool_service.serve()
    tools_file = tmp_path_factory.mktemp("tools") / "tools.json"
    tools_file.write_text(json.dumps(tool_service.tools_config(effects)))
    env = {**E2E_ENV, **SEARCHES_DOCUMENTS, "PARLEY_TOOLS_FILE": str(tools_file)}
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("stack-logs"), env)
    try:
        yield Stack(inner, effects)
    finally:
        inner.stop()
        effects.release.set()
        effects.shutdown()
        isolated.drop(kafka, cassandra)
