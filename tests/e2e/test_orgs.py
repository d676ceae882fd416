"""An organisation run through its admin API on the admin's web session: members added (without keys),
roles and standing changed, keys revoked, usage read, its own moderation set; and the scopes that keep
a key to its user's own content (DESIGN.md §12)."""

from __future__ import annotations

import pytest

from parley.users import create_key, create_org, create_user
from tools.client import ApiError, ParleyClient


async def _status(client: ParleyClient, method: str, path: str, **kwargs) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    response = await client._http.request(method, path, **kwargs)
    code = response.json()["error"]["code"] if response.status_code >= 400 and response.content else ""
    return response.status_code, code


async def test_an_admin_runs_the_organisation_and_a_revoked_key_stops_at_once(stack) -> None:  # type: ignore[no-untyped-def]
    team = create_org(stack.inner.session, "acme")
    admin_id, admin_key = create_user(stack.inner.session, "ana", "enterprise", org_id=team, role="admin")
    admin, admin_by_key = stack.web_client(admin_id), ParleyClient(stack.url, admin_key)
    try:
        added = await admin._json("POST", "/v1/org/users", json={"name": "bo"})
        assert (added["user"]["org_id"], added["user"]["role"], added["user"]["tier"]) == (team, "member", "enterprise")
        assert set(added) == {"user"}  # no key: one the admin saw would read the member's conversations
        uid = added["user"]["id"]
        # The admin mints no key of a member's: that route is gone (405: the path answers GET only).
        assert (await _status(admin, "POST", f"/v1/org/users/{uid}/keys", json={"label": "x"}))[0] == 405
        assert await admin._json("GET", f"/v1/org/users/{uid}/keys") == {"keys": []}

        # The member's keys are the operator's to give (parley users key), or their own to make on their session.
        first_id, first = create_key(stack.inner.session, uid, "first")
        member, member_web = ParleyClient(stack.url, first), stack.web_client(uid)
        cid = await member.create_conversation("work")
        await member.send(cid, "Hello from bo")
        me = await member._json("GET", "/v1/me")
        assert me["org"]["id"] == team and me["user"]["role"] == "member"
        assert await _status(member_web, "GET", "/v1/org/users") == (403, "admin_only")  # members are not admins
        assert (await _status(admin, "GET", f"/v1/conversations/{cid}"))[0] == 404  # the admin reads none of it

        listed = await admin._json("GET", "/v1/org/users")
        assert {u["name"] for u in listed["users"]} == {"ana", "bo"}
        usage = await admin._json("GET", "/v1/org/usage", params={"days": 1})
        assert {u["user_id"] for u in usage["users"]} == {u["id"] for u in listed["users"]}
        # The admin's key runs nothing of the organisation: that is the session's admin scope.
        assert await _status(admin_by_key, "GET", "/v1/org/users") == (403, "insufficient_scope")

        # Rotation on the member's own session: a second key works, the first is revoked by the admin and
        # refused at once on this gateway.
        second = await member_web._json("POST", "/v1/me/keys", json={"label": "laptop"})
        assert second["key"]["scopes"] == ["chat"]
        rotated = ParleyClient(stack.url, second["api_key"])
        assert (await rotated._json("GET", "/v1/me"))["user"]["id"] == uid
        assert await _status(admin, "DELETE", f"/v1/org/users/{uid}/keys/{first_id}") == (204, "")
        assert (await _status(member, "GET", "/v1/me"))[0] == 401
        keys = (await member_web._json("GET", "/v1/me/keys"))["keys"]
        assert {(k["label"], k["revoked_at"] is not None) for k in keys} == {("first", True), ("laptop", False)}

        # Disabled: refused; enabled again: served. An admin cannot disable itself.
        assert (await admin._json("PATCH", f"/v1/org/users/{uid}", json={"disabled": True}))["disabled"] is True
        assert (await _status(rotated, "GET", "/v1/me"))[0] == 401
        await admin._json("PATCH", f"/v1/org/users/{uid}", json={"disabled": False})
        assert (await _status(rotated, "GET", "/v1/me"))[0] == 200
        assert (await _status(admin, "PATCH", f"/v1/org/users/{admin_id}", json={"disabled": True}))[0] == 409

        # The organisation's own moderation and residency label; a bad policy is refused by name.
        org = await admin._json(
            "PATCH", "/v1/org", json={"residency": "eu", "moderation_policy": {"block": ["violence"], "default_threshold": 0.6}}
        )
        assert org["residency"] == "eu" and org["moderation_policy"]["block"] == ["violence"]
        with pytest.raises(ApiError) as bad:
            await admin._json("PATCH", "/v1/org", json={"moderation_policy": {"mode": "strict"}})
        assert bad.value.status == 422 and "mode" in bad.value.body["error"]["message"]
        for client in (rotated, member, member_web):
            await client.close()
    finally:
        await admin.close()
        await admin_by_key.close()


async def test_a_key_mints_no_key_revokes_none_and_erases_nothing(stack) -> None:  # type: ignore[no-untyped-def]
    """M4: a key pasted into a client reads and writes its user's content, and nothing more."""
    user_id, key = create_user(stack.inner.session, "pasted", "plus")
    client = ParleyClient(stack.url, key)
    try:
        cid = await client.create_conversation("mine")
        assert (await client.conversation(cid))["id"] == cid
        assert (await client._json("GET", "/v1/me"))["user"]["id"] == user_id
        for method, path, kwargs in (
            ("POST", "/v1/me/keys", {"json": {"label": "persistence"}}),
            ("GET", "/v1/me/keys", {}),
            ("DELETE", "/v1/me/keys/key_000000000000", {}),
            ("DELETE", "/v1/me", {"params": {"confirm": "true"}}),
        ):
            assert await _status(client, method, path, **kwargs) == (403, "insufficient_scope"), (method, path)
        assert (await client.conversation(cid))["id"] == cid  # nothing was erased
        web = stack.web_client(user_id)
        try:
            listed = (await web._json("GET", "/v1/me/keys"))["keys"]
            assert [(k["label"], k["scopes"]) for k in listed] == [("default", ["chat"])]  # and nothing was minted
        finally:
            await web.close()
    finally:
        await client.close()


async def test_an_organisations_tool_rules_deny_its_members_calls(stack) -> None:  # type: ignore[no-untyped-def]
    """The admin's rules tighten the operator's (the shared stack asks for every fetch_url call): an org deny
    wins, names its rule, and a member's call is never asked; a regex (an operator's tool only) is refused."""
    import asyncio
    import base64
    import json
    import time

    team = create_org(stack.inner.session, "toolco")
    admin_id, _ = create_user(stack.inner.session, "ada", "plus", org_id=team, role="admin")
    _, member_key = create_user(stack.inner.session, "bea", "plus", org_id=team)
    admin, member = stack.web_client(admin_id), ParleyClient(stack.url, member_key)
    try:
        rules = [{"name": "no-intranet", "effect": "deny", "tool": "fetch_url", "arguments": {"url": {"prefix": "https://intranet."}}}]
        assert (await admin._json("PATCH", "/v1/org", json={"tool_rules": rules}))["tool_rules"] == rules
        with pytest.raises(ApiError) as bad:
            await admin._json("PATCH", "/v1/org", json={"tool_rules": [{"name": "r", "effect": "allow", "tool": {"regex": ".*"}}]})
        assert bad.value.status == 422 and bad.value.body["error"]["code"] == "invalid_tool_rules"

        cid = await member.create_conversation()
        fetch = json.dumps({"name": "fetch_url", "arguments": {"url": "https://intranet.toolco.example/payroll"}})
        script = base64.b64encode(f"<tool_call>\n{fetch}\n</tool_call>".encode()).decode()
        await member.send(cid, f"[[reply:{script}]]", tools=["fetch_url"])
        deadline = time.monotonic() + 120
        while not (calls := await member.tool_calls(cid)):
            assert time.monotonic() < deadline, "the call was never judged"
            await asyncio.sleep(0.3)
        assert (calls[0]["decision"], calls[0]["rule"]) == ("deny", "org:no-intranet")

        assert (await admin._json("PATCH", "/v1/org", json={"tool_rules": None}))["tool_rules"] is None
    finally:
        await admin.close()
        await member.close()
