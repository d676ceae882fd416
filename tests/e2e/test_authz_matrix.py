"""Every route × every kind of caller, generated from the OpenAPI document (DESIGN.md §12).

Each operation declares ``x-access`` (whose resources it serves) and ``x-parley-scope`` (what the
caller's credential must hold). The callers are API keys (the resources' owner, another member of
the same organisation, its admin, a user of another organisation, a revoked key, no key) and web
sessions (the owner's, the other member's, the admin's, the other organisation's user's). What each
may get follows from the two alone:

- scope ``none``: no credential is needed; ``chat``: any live credential; ``account`` and ``admin``:
  the web session only: a key gets 403 ``insufficient_scope`` before anything else is looked at;
- public: anyone is served;
- user: any live credential is served (on its own data); a revoked key or none is a 401;
- owner: only the owner is served; everyone else gets a 404, as for an id that does not exist;
- admin: the organisation's admin is served; its members get 403; another organisation's
  admin acts on its own organisation (and gets a 404 for a user id of this one);
- session: the web page's sign-in flows (``/v1/auth/*``), which need a browser, a password or an
  OpenID provider: tests/integration/test_web_sessions.py and tests/browser/test_sign_in.py.

"Served" means past authentication and authorisation: no 401, 403 or 404 (a body a route does not
like is a 4xx of its own). A route added to the document without ``x-access`` or ``x-parley-scope``,
or with a required body this module has no example of, fails here: no route skips the matrix.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from parley.cassandra import AsyncCql
from parley.org_tools import Listed, OrgTools, checked
from parley.users import KEY_SCOPES, SCOPES, create_key, create_org, create_user, hash_key, key_id_of, personal_org_id, revoke
from tools.client import session_headers

DOC = yaml.safe_load((Path(__file__).resolve().parents[2] / "schemas" / "openapi.yaml").read_text())
ACCESS = ("public", "user", "owner", "admin", "session")
SESSION = " session"  # the suffix of a caller on a web session
#: The owner's key and session last: their calls may delete. The owner's session works on resources of its own
#: (a second conversation and document of the owner's), so the key's deletes leave it something to delete.
CALLERS = (
    "no key", "revoked", "other org", "same org", "admin", "other org session", "same org session", "admin session", "owner",
    "owner session",
)  # fmt: skip
DENIED = {401, 403, 404}


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    ops = [(m, p, op) for p, item in DOC["paths"].items() for m, op in item.items() if m != "parameters"]
    # Deletes last, and the owner's conversation and document (which the other routes use) at the very end.
    return sorted(ops, key=lambda o: (o[0] == "delete", o[1] in ("/v1/conversations/{conversation_id}", "/v1/documents/{document_id}")))


def _bodies(ids: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """A valid body (or query) for each operation that requires one (the matrix tests access, not validation)."""
    return {
        ("patch", "/v1/conversations/{conversation_id}"): {"json": {"title": "renamed"}},
        ("post", "/v1/conversations/{conversation_id}/messages"): {"json": {"content": "hello", "client_message_id": str(uuid.uuid4())}},
        ("put", "/v1/conversations/{conversation_id}/leaf"): {"json": {"leaf_id": ids["message_id"]}},
        ("put", "/v1/conversations/{conversation_id}/messages/{message_id}/feedback"): {"json": {"rating": "up"}},
        ("post", "/v1/conversations/{conversation_id}/tool-calls/{call_id}"): {"json": {"answer": "approve"}},
        ("post", "/v1/messages/{message_id}/regenerate"): {"json": {"client_message_id": str(uuid.uuid4())}},
        ("post", "/v1/telemetry"): {"json": {"ttft_ms": 120}},
        ("post", "/v1/imports"): {"json": DOC["paths"]["/v1/imports"]["post"]["requestBody"]["content"]["application/json"]["example"]},
        ("post", "/v1/documents"): {"files": {"file": ("n.txt", b"Some notes about the quarter.\n", "text/plain")}},
        ("put", "/v1/memory"): {"json": {"facts": ["likes tea"]}},
        ("get", "/v1/search"): {"params": {"q": "hello"}},  # a required query: without it a 422 says nothing of access
        ("patch", "/v1/org"): {"json": {"residency": "eu"}},
        # A private address: refused by the SSRF guard (422) before anything is connected to.
        ("post", "/v1/org/tools"): {"json": {"name": "ledger", "url": "http://10.255.255.1/mcp"}},
        ("post", "/v1/org/users"): {"json": {"name": "new member"}},
        ("patch", "/v1/org/users/{user_id}"): {"json": {"role": "member"}},
        ("post", "/v1/chat/completions"): {"json": {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}},
        ("post", "/v1/moderations"): {"json": {"input": "hello there"}},
    }


def expected(access: str, scope: str, caller: str, path: str) -> str | tuple[int, str]:
    """'served', or the status (and for a 403 of scopes, the code) the caller must get."""
    if access == "public":
        return "served"
    if caller in ("no key", "revoked"):
        return 401, ""
    if not caller.endswith(SESSION) and scope not in KEY_SCOPES:
        return 403, "insufficient_scope"
    who = caller.removesuffix(SESSION)
    if access == "user":
        return "served"
    if access == "owner":
        return "served" if who == "owner" else (404, "")
    if who in ("owner", "same org"):
        return 403, "admin_only"
    if who == "other org" and "{user_id}" in path:
        return 404, ""
    return "served"


def test_every_operation_declares_its_access_and_scope_and_has_a_body_to_send() -> None:
    ids = {"message_id": "m"}
    for method, path, op in _operations():
        assert op.get("x-access") in ACCESS, f"{method.upper()} {path}: x-access must be one of {ACCESS}"
        assert op.get("x-parley-scope") in (*SCOPES, "none"), f"{method.upper()} {path}: x-parley-scope must be one of {SCOPES} or none"
        assert (op["x-parley-scope"] == "none") == (op["x-access"] in ("public", "session")), f"{method.upper()} {path}"
        if op.get("requestBody", {}).get("required") and op["x-access"] != "session":
            assert (method, path) in _bodies(ids), f"{method.upper()} {path}: add an example body to _bodies"


@pytest.fixture(scope="module")
def world(stack):  # type: ignore[no-untyped-def]
    """An organisation with an admin and two members, another organisation's user, a revoked key, the
    owner's second key, and a web session of each live user but the revoked one: the credentials by caller."""
    session = stack.inner.session
    team = create_org(session, "team")
    keys: dict[str, str | None] = {"no key": None}
    users: dict[str, str] = {}
    users["owner"], keys["owner"] = create_user(session, "owner", "plus", org_id=team)
    users["same org"], keys["same org"] = create_user(session, "same", "plus", org_id=team)
    users["admin"], keys["admin"] = create_user(session, "admin", "plus", org_id=team, role="admin")
    users["other org"], keys["other org"] = create_user(session, "other", "plus")
    revoked_id, keys["revoked"] = create_user(session, "revoked", "plus", org_id=team)
    revoke(session, revoked_id, key_id_of(hash_key(keys["revoked"])))
    second_key, _ = create_key(session, users["owner"], "second")
    # An MCP server of each organisation whose admin may remove one (the team's, and the other user's own).
    ledger = checked("ledger", "https://mcp.example/mcp", [Listed("add", "", {"type": "object"})])
    for org in (team, personal_org_id(users["other org"])):
        asyncio.run(OrgTools(AsyncCql(stack.cassandra, session)).put(org, ledger))
    credentials = {caller: {"Authorization": f"Bearer {key}"} if key else {} for caller, key in keys.items()}
    for who, user_id in users.items():
        credentials[who + SESSION] = session_headers(stack.url, *stack.sign_in(user_id))
    return users["owner"], second_key, credentials


async def _owner_resources(url: str, key: str) -> dict[str, str]:
    from tools.client import ParleyClient

    client = ParleyClient(url, key)
    try:
        cid = await client.create_conversation("mine")
        reply = await client.send(cid, "Hello")
        # A call of the built-in fetch_url (the model's, scripted): its id for the tool-call routes. The owner's
        # answer to it is a 409 (it was never asked: read-only, so allowed), everyone else's a 404.
        fetch = {"name": "fetch_url", "arguments": {"url": "http://127.0.0.1:9/notes"}}
        script = base64.b64encode(f"<tool_call>\n{json.dumps(fetch)}\n</tool_call>".encode()).decode()
        await client.send(cid, f"[[reply:{script}]]", tools=["fetch_url"])
        deadline = time.monotonic() + 120
        while not (calls := await client.tool_calls(cid)):
            assert time.monotonic() < deadline, "the fetch_url call was never recorded"
            await asyncio.sleep(0.3)
        doc = await client.upload("mine.txt", b"A page of my own notes.\n", "text/plain")
        await client.until_processed(doc["id"])
        share = (await client._http.post(f"/v1/conversations/{cid}/shares", json={})).json()
        return {
            "conversation_id": cid, "message_id": reply.head["reply_id"], "document_id": doc["id"], "page": "1",
            "call_id": calls[0]["id"], "share_id": share["id"], "secret": share["path"].removeprefix("/s/"),
        }
    finally:
        await client.close()


async def _call(http: httpx.AsyncClient, method: str, url: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, str]:
    """(status, error code) of one call: a stream's status is all the matrix needs, so it is closed unread."""
    async with http.stream(method.upper(), url, headers=headers, **body) as response:
        if response.status_code != 403:
            return response.status_code, ""
        await response.aread()
        return 403, response.json()["error"]["code"]  # a JSON error with a stable code


async def test_every_route_answers_every_caller_as_its_access_and_scope_say(stack, world) -> None:  # type: ignore[no-untyped-def]
    owner_id, second_key, credentials = world
    first = await _owner_resources(stack.url, credentials["owner"]["Authorization"].removeprefix("Bearer "))
    own = await _owner_resources(stack.url, credentials["owner"]["Authorization"].removeprefix("Bearer "))
    common = {"user_id": owner_id, "key_id": second_key, "model_id": "auto", "name": "ledger"}
    wrong: list[str] = []
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        for method, path, op in _operations():
            if op["x-access"] == "session":
                continue
            for caller in CALLERS:
                ids = (own if caller == "owner" + SESSION else first) | common
                url = re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], path)
                status, code = await _call(http, method, url, credentials[caller], _bodies(ids).get((method, path), {}))
                want = expected(op["x-access"], op["x-parley-scope"], caller, path)
                if want == "served":
                    ok = status not in DENIED and status < 500
                else:
                    ok = status == want[0] and (not want[1] or code == want[1])
                if not ok:
                    wrong.append(f"{method.upper()} {path} as {caller}: {status} {code}, expected {want}")
    assert not wrong, "\n".join(wrong)


async def test_ids_of_another_organisation_or_of_nothing_are_only_ever_404(stack, world) -> None:  # type: ignore[no-untyped-def]
    """The fuzz: the other organisation's user, on its web session (every scope), tries the owner's ids and random
    ones on every owner route."""
    _, _, credentials = world
    ids = await _owner_resources(stack.url, credentials["owner"]["Authorization"].removeprefix("Bearer "))
    statuses: dict[int, int] = {}
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        for method, path, op in _operations():
            if op["x-access"] != "owner" or method == "delete":
                continue
            for _ in range(3):
                fake = {"conversation_id": str(uuid.uuid4()), "message_id": str(uuid.uuid4()), "document_id": str(uuid.uuid4()),
                        "page": "1", "key_id": "key_" + uuid.uuid4().hex[:12]}  # fmt: skip
                for chosen in (ids, fake):
                    url = re.sub(r"\{(\w+)\}", lambda m: chosen.get(m.group(1), fake.get(m.group(1), "x")), path)
                    body = _bodies({"message_id": chosen["message_id"]}).get((method, path), {})
                    status, _ = await _call(http, method, url, credentials["other org" + SESSION], body)
                    statuses[status] = statuses.get(status, 0) + 1
    assert set(statuses) == {404}, statuses
