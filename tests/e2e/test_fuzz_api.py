"""Property-based fuzzing of the HTTP API from its OpenAPI document (schemathesis), against the
real gateway of the e2e stack: no 5xx, only documented status codes and content types, bodies
that match their schemas, invalid input refused with a 4xx, and no answer without an API key.

Ids in paths and bodies are what a client could send: a generated string, or (chosen
deterministically from the generated value, so a run is reproducible) a real id of the caller's,
or another user's, or a user message where a reply is expected. Valid bodies on real ids start real replies: their SSE
streams are read to a bounded number of events or a bounded time, never forever.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

import yaml

from parley.org_tools import MAX_SERVERS
from parley.users import KEY_SCOPES, create_key, create_org, create_user
from tests.fixtures.mcp_server import echoing, serving
from tools.client import ParleyClient, session_headers

#: Not beside another xdist worker (make test's second pytest process): under pytest-xdist the schemathesis
#: run below answered every operation 4xx only, and the coverage test after it failed; alone it reaches 2xx.
pytestmark = pytest.mark.alone

#: Per operation; with derandomize the same examples every run. Bounded so the module takes a
#: few minutes at most on two cores.
MAX_EXAMPLES = 30
#: Any answer within this long (a loaded two-core machine included); an SSE reply is read for at most
#: this long or this many events, since a live stream may not end.
STREAM_READ_S = 10.0
STREAM_EVENTS = 50
OPENAPI = Path(__file__).resolve().parents[2] / "schemas" / "openapi.yaml"
DOC = yaml.safe_load(OPENAPI.read_text())

#: Status classes each operation answered, to show the fuzzing got past validation.
ANSWERED: dict[str, set[int]] = defaultdict(set)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


@dataclass(frozen=True)
class Ids:
    """Real ids to aim generated requests at."""

    key: str
    conversation_id: str  # the caller's, with a finished turn
    reply_id: str  # an assistant message of it
    user_message_id: str  # the user message it answers
    foreign_conversation_id: str  # another user's
    foreign_reply_id: str
    url: str = ""
    document_id: str = ""  # the caller's, indexed (page 1 is ready)
    foreign_document_id: str = ""
    user_id: str = ""  # the caller: an admin of a team organisation
    kept: list[tuple[str, str]] = field(default_factory=list)  # the member PATCH and POST are aimed at
    session: dict[str, str] = field(default_factory=dict)  # the caller's web session: what the key's chat scope does not reach
    cassandra: object = None  # the operator's seat: members' keys (an admin makes none)
    call_id: str = ""  # a call of the caller's conversation waiting for its answer (the first valid answer takes it)
    mcp_url: str = ""  # an MCP server on loopback (which the shared stack's operator opened to the SSRF guard)
    secret: str = ""  # a live share link of the caller's conversation

    def throwaway_share(self) -> str:
        """A new link to the caller's conversation: what a generated DELETE may revoke."""
        response = httpx.post(f"{self.url}/v1/conversations/{self.conversation_id}/shares", headers={"Authorization": f"Bearer {self.key}"}, json={})
        response.raise_for_status()
        return str(response.json()["id"])

    def credentials(self, case: schemathesis.Case) -> dict[str, str]:
        """The key where it reaches (``chat``), else the caller's web session (``account``, ``admin``)."""
        # A method the path does not serve (the fuzzing sends those too) is the key's to be refused.
        scope = DOC["paths"].get(case.path, {}).get(case.method.lower(), {}).get("x-parley-scope", "chat")
        return {"Authorization": f"Bearer {self.key}"} if scope in KEY_SCOPES else self.session

    def member(self, *, fresh: bool) -> tuple[str, str]:
        """(user id, key id) of a member of the caller's organisation: a new one for what may erase or revoke
        (``fresh``), else the one kept for the rest, so the organisation stays a few people (its usage is read
        per member)."""
        if fresh or not self.kept:
            made = self.throwaway_member()
            if not fresh:
                self.kept.append(made)
            return made
        return self.kept[0]

    def throwaway_member(self) -> tuple[str, str]:
        """A new member (added by the caller) and a key of theirs (made by the operator)."""
        response = httpx.post(f"{self.url}/v1/org/users", headers=self.session, json={"name": "m"})
        response.raise_for_status()
        user_id = str(response.json()["user"]["id"])
        return user_id, create_key(self.cassandra, user_id)[0]  # type: ignore[arg-type]

    def throwaway_key(self) -> str:
        """A new key of the caller's (never the one the fuzzing uses): what a generated DELETE may revoke."""
        response = httpx.post(f"{self.url}/v1/me/keys", headers=self.session, json={})
        response.raise_for_status()
        return str(response.json()["key"]["id"])

    def throwaway_document(self) -> str:
        """A new document of the caller's: what a generated DELETE may delete."""
        return _upload(self.url, self.key, wait=False)

    def throwaway_server(self) -> str:
        """An MCP server registered by the caller: what a generated DELETE may remove (the oldest goes first when
        the organisation has as many as it may)."""
        servers = httpx.get(f"{self.url}/v1/org/tools", headers=self.session).json()["servers"]
        if len(servers) >= MAX_SERVERS:
            httpx.delete(f"{self.url}/v1/org/tools/{servers[0]['name']}", headers=self.session).raise_for_status()
        name = f"fuzz-{uuid.uuid4().hex[:8]}"
        httpx.post(f"{self.url}/v1/org/tools", headers=self.session, json={"name": name, "url": self.mcp_url}).raise_for_status()
        return name

    def throwaway(self) -> str:
        """A new conversation of the caller's: what a generated DELETE may delete, leaving the others' ids real."""
        response = httpx.post(f"{self.url}/v1/conversations", headers={"Authorization": f"Bearer {self.key}"}, json={})
        response.raise_for_status()
        return str(response.json()["id"])

    def aim(self, case: schemathesis.Case) -> None:
        """Swap a generated path id for a real one in three cases of four, picked by the generated value."""
        params = case.path_parameters or {}
        writes = case.method.upper() in ("DELETE", "PATCH", "POST")
        if "user_id" in params and zlib.crc32(str(params["user_id"]).encode("utf-8", "surrogatepass")) % 4:
            member, member_key = self.member(fresh=case.method.upper() == "DELETE") if writes else (self.user_id, "")
            params["user_id"] = member
            if "key_id" in params:
                params["key_id"] = member_key or params["key_id"]
        elif "key_id" in params and zlib.crc32(str(params["key_id"]).encode("utf-8", "surrogatepass")) % 4:
            params["key_id"] = self.throwaway_key()
        for name, value in list(params.items()):
            pick = zlib.crc32(str(value).encode("utf-8", "surrogatepass")) % 4
            if name == "conversation_id" and pick:
                # A delete of the conversation itself takes a throwaway one; taking a reply's rating back needs the reply's.
                deletes_it = case.method.upper() == "DELETE" and case.path == "/v1/conversations/{conversation_id}"
                mine = self.throwaway() if deletes_it else self.conversation_id
                params[name] = self.foreign_conversation_id if pick == 3 else mine
            elif name == "document_id" and pick:
                mine = self.throwaway_document() if case.method.upper() == "DELETE" else self.document_id
                params[name] = self.foreign_document_id if pick == 3 else mine
            elif name == "page" and pick:
                params[name] = "1"
            elif name == "model_id" and pick:
                params[name] = "auto"  # the one model every deployment lists
            elif name == "message_id" and pick:
                params[name] = (self.reply_id, self.user_message_id, self.foreign_reply_id)[pick - 1]
            elif name == "call_id" and pick:
                params[name] = self.call_id
            elif name == "secret" and pick:
                params[name] = self.secret
            elif name == "share_id" and pick:
                params[name] = self.throwaway_share()
            elif name == "name" and case.path == "/v1/org/tools/{name}" and pick:
                params[name] = self.throwaway_server()
        body = case.body if isinstance(case.body, dict) else {}
        url = body.get("url") if case.path == "/v1/org/tools" else None
        if isinstance(url, str) and url.startswith(("http://", "https://")) and len(url) <= 2048 and zlib.crc32(url.encode("utf-8", "surrogatepass")) % 4:
            body["url"] = self.mcp_url  # a valid URL of a server that answers; the rest (and invalid ones) stay as generated
        if case.path == "/v1/chat/completions" and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
            # Without a cap an OpenAI call's reply runs to the end of the pool's context (20 s on the synthetic
            # engine), past the read bound: a cap a client could send, so a valid call answers within it.
            body["max_tokens"] = 16
        if case.path == "/v1/documents" and body.get("conversation_id") == []:
            # A form field generated as an array (a negative case) is sent as no field at all, which is a valid
            # upload: as a client could send it, the array is the field twice (refused: repeated_field).
            body["conversation_id"] = ["a", "b"]
        for name in ("leaf_id", "parent_id"):  # ids in bodies too: a real message, or another user's
            if isinstance(body.get(name), str) and (pick := zlib.crc32(body[name].encode("utf-8", "surrogatepass")) % 4):
                body[name] = (self.reply_id, self.user_message_id, self.foreign_reply_id)[pick - 1]


async def _asked_call(url: str, key: str, conversation_id: str) -> str:
    """A call of the built-in fetch_url in ``conversation_id`` (the model's, scripted), waiting for its answer
    (the shared stack asks every call)."""
    client = ParleyClient(url, key)
    fetch = json.dumps({"name": "fetch_url", "arguments": {"url": "https://example.com/"}})
    script = base64.b64encode(f"<tool_call>\n{fetch}\n</tool_call>".encode()).decode()
    try:
        await client.send(conversation_id, f"[[reply:{script}]]", tools=["fetch_url"])
        for _ in range(600):
            asked = [c for c in await client.tool_calls(conversation_id) if c["state"] == "asked"]
            if asked:
                return str(asked[0]["id"])
            await asyncio.sleep(0.2)
        raise AssertionError("the fetch_url call was never asked")
    finally:
        await client.close()


async def _turn(url: str, key: str) -> tuple[str, str, str]:
    client = ParleyClient(url, key)
    try:
        cid = await client.create_conversation("fuzz")
        reply = await client.send(cid, "A message to fuzz around")
        assert reply.final is not None and reply.final.event == "done", reply.events
        for _ in range(300):  # stored, so the message routes find it
            conv = await client.conversation(cid)
            if any(m["id"] == reply.head["reply_id"] and m["status"] not in (None, "streaming") for m in conv["messages"]):
                break
            await asyncio.sleep(0.2)
        return cid, reply.head["reply_id"], reply.head["user_message_id"]
    finally:
        await client.close()


def _upload(url: str, key: str, *, wait: bool) -> str:
    """A one-page text document of ``key``'s; ``wait``: until it is indexed."""
    headers = {"Authorization": f"Bearer {key}"}
    response = httpx.post(f"{url}/v1/documents", headers=headers, files={"file": ("notes.txt", b"Fuzzing notes: one page.", "text/plain")})
    response.raise_for_status()
    document_id = str(response.json()["id"])
    for _ in range(300 if wait else 0):
        if httpx.get(f"{url}/v1/documents/{document_id}", headers=headers).json()["status"] == "ready":
            break
        time.sleep(0.2)
    return document_id


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serving(echoing("fuzz", "echo", "Echo")) as url:
        yield url


@pytest.fixture(scope="module")
def ids(stack, mcp_url: str) -> Ids:
    # The caller: the admin of an organisation of its own, so the /v1/org routes have people to act on.
    user_id, key = create_user(stack.inner.session, "fuzz", "plus", org_id=create_org(stack.inner.session, "fuzz"), role="admin")
    other = stack.new_key("plus")
    cid, reply_id, user_message_id = asyncio.run(_turn(stack.url, key))
    foreign_cid, foreign_reply, _ = asyncio.run(_turn(stack.url, other))
    document, foreign_document = _upload(stack.url, key, wait=True), _upload(stack.url, other, wait=True)
    call_id = asyncio.run(_asked_call(stack.url, key, cid))
    shared = httpx.post(f"{stack.url}/v1/conversations/{cid}/shares", headers={"Authorization": f"Bearer {key}"}, json={})
    shared.raise_for_status()
    return Ids(
        key, cid, reply_id, user_message_id, foreign_cid, foreign_reply, stack.url, document, foreign_document, user_id,
        session=session_headers(stack.url, *stack.sign_in(user_id)), cassandra=stack.inner.session, call_id=call_id,
        mcp_url=mcp_url, secret=shared.json()["path"].removeprefix("/s/"),
    )  # fmt: skip


#: The document the gateway serves at /openapi.yaml (the same file; tests/unit/gateway/test_openapi.py keeps it
#: equal to the routes), loaded at collection so each operation is a test of its own.
schema = schemathesis.openapi.from_path(
    OPENAPI,
    config=schemathesis.Config.from_dict(
        {
            "request-timeout": STREAM_READ_S,
            "max-stream-events": STREAM_EVENTS,
            # Unknown query parameters are ignored, as HTTP APIs do; the key is ours to send (and
            # `ignored_auth` sends requests without it).
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "allow-extra-parameters": False,
                "with-security-parameters": False,
            },
            # Bad input is refused with the 4xx DESIGN §7 names: 413 for over-long text, too.
            "checks": {"negative_data_rejection": {"expected-statuses": [400, 401, 404, 413, 415, 422]}},
        }
    ),
).exclude(
    # The web page's sign-in flows need a browser's Origin, a real password or an OpenID provider to
    # answer 2xx: tests/integration/test_web_sessions.py and tests/browser/test_sign_in.py cover them.
    path_regex="^/v1/auth/",
).exclude(
    # Erasing the caller would end the fuzzing of every later operation: tests/e2e/test_erasure.py.
    method="DELETE",
    path="/v1/me",
)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure prints its curl as generated
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_fuzzed_requests_as_documented(case: schemathesis.Case, ids: Ids, stack) -> None:
    ids.aim(case)
    response = case.call_and_validate(base_url=stack.url, headers=ids.credentials(case), checks=CHECKS)
    ANSWERED[f"{case.method} {case.path}"].add(response.status_code // 100)


def test_the_fuzzing_reached_every_operation_past_validation() -> None:
    """Not only refusals: each operation also answered 2xx to some generated request (run with the test above)."""
    operations = {f"{op.method.upper()} {op.path}" for op in (result.ok() for result in schema.get_all_operations())}
    assert {op for op in operations if 2 not in ANSWERED[op]} == set(), dict(ANSWERED)
