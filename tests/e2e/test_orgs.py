"""An organisation run through its admin API: members added with keys, roles and standing changed,
keys rotated and revoked, usage read, its own moderation set (DESIGN.md §12)."""

from __future__ import annotations

import pytest

from parley.users import create_org, create_user
from tools.client import ApiError, ParleyClient


async def _status(client: ParleyClient, method: str, path: str, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return (await client._http.request(method, path, **kwargs)).status_code


async def test_an_admin_runs_the_organisation_and_a_revoked_key_stops_at_once(stack) -> None:  # type: ignore[no-untyped-def]
    team = create_org(stack.inner.session, "acme")
    _, admin_key = create_user(stack.inner.session, "ana", "enterprise", org_id=team, role="admin")
    admin = ParleyClient(stack.url, admin_key)
    try:
        added = await admin._json("POST", "/v1/org/users", json={"name": "bo"})
        assert (added["user"]["org_id"], added["user"]["role"], added["user"]["tier"]) == (team, "member", "enterprise")
        member = ParleyClient(stack.url, added["api_key"])
        cid = await member.create_conversation("work")
        await member.send(cid, "Hello from bo")
        me = await member._json("GET", "/v1/me")
        assert me["org"]["id"] == team and me["user"]["role"] == "member"
        assert await _status(member, "GET", "/v1/org/users") == 403  # members are not admins

        listed = await admin._json("GET", "/v1/org/users")
        assert {u["name"] for u in listed["users"]} == {"ana", "bo"}
        usage = await admin._json("GET", "/v1/org/usage", params={"days": 1})
        assert {u["user_id"] for u in usage["users"]} == {u["id"] for u in listed["users"]}

        # Rotation: a second key works, the first is revoked and refused at once on this gateway.
        uid = added["user"]["id"]
        second = await admin._json("POST", f"/v1/org/users/{uid}/keys", json={"label": "laptop"})
        rotated = ParleyClient(stack.url, second["api_key"])
        assert (await rotated._json("GET", "/v1/me"))["user"]["id"] == uid
        assert await _status(admin, "DELETE", f"/v1/org/users/{uid}/keys/{added['key_id']}") == 204
        assert await _status(member, "GET", "/v1/me") == 401
        keys = (await rotated._json("GET", "/v1/me/keys"))["keys"]
        assert {(k["label"], k["revoked_at"] is not None) for k in keys} == {("default", True), ("laptop", False)}

        # Disabled: refused; enabled again: served. An admin cannot disable itself.
        assert (await admin._json("PATCH", f"/v1/org/users/{uid}", json={"disabled": True}))["disabled"] is True
        assert await _status(rotated, "GET", "/v1/me") == 401
        await admin._json("PATCH", f"/v1/org/users/{uid}", json={"disabled": False})
        assert await _status(rotated, "GET", "/v1/me") == 200
        admin_id = (await admin._json("GET", "/v1/me"))["user"]["id"]
        assert await _status(admin, "PATCH", f"/v1/org/users/{admin_id}", json={"disabled": True}) == 409

        # The organisation's own moderation and residency label; a bad policy is refused by name.
        org = await admin._json(
            "PATCH", "/v1/org", json={"residency": "eu", "moderation_policy": {"block": ["violence"], "default_threshold": 0.6}}
        )
        assert org["residency"] == "eu" and org["moderation_policy"]["block"] == ["violence"]
        with pytest.raises(ApiError) as bad:
            await admin._json("PATCH", "/v1/org", json={"moderation_policy": {"mode": "strict"}})
        assert bad.value.status == 422 and "mode" in bad.value.body["error"]["message"]
        await rotated.close()
        await member.close()
    finally:
        await admin.close()
