"""Your account and your organisation: ``/v1/me…`` and ``/v1/org…`` (DESIGN.md §12).

What each route needs is a scope of the caller's credential (gateway/auth.py):

- ``chat`` (any key or session): who you are (``GET /v1/me``) and your organisation (``GET /v1/org``);
- ``account`` (the web session, never a key): your keys (``/v1/me/keys``: list, make, revoke; rotate by
  making a new one and revoking the old) and erasing yourself (``DELETE /v1/me?confirm=true``). A key
  pasted into a client can so neither outlive its revocation by minting others nor erase the account;
- ``admin`` (the web session, of a user whose role is admin): running the organisation. Admins add users (they get the
  admin's tier), disable them, change roles, list and revoke their keys, read the organisation's usage
  (counts only), set its name, data-residency label and moderation (PARLEY_MODERATION_ORG_REFRESH_S until
  the moderation processor applies it), and erase members.

An admin never holds a credential of a member's: no route makes a member's key, and a new member
gets none (they sign in with the organisation's OpenID provider or an account the operator gives them,
then make their own keys). So an admin reads no member's conversations, documents or memory: every
content route is keyed by the caller's own user. A user id of another organisation is a 404, like one
that does not exist. A revoked key or a disabled user stops working within ``PARLEY_GATEWAY_AUTH_CACHE_S``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import erasure, quotas
from gateway.auth import Principal
from gateway.directory import KeyRow, OrgRow, UserRow
from gateway.errors import Conflict, Forbidden, NotFound, Unprocessable
from gateway.services import Services, services, trace_id
from gateway.usage import day_range, parse_days, totals_json, usage_json
from gateway.validation import MISSING, json_body, only, string
from moderation.policy import org_policy_from
from parley.users import ACCOUNT, ADMIN, ROLES, Statement, new_key, new_user, revoke_key
from streams.tool_policy import Layer, RuleError, rules_from
from streams.usage_fold import Totals

MAX_NAME = 200
#: An organisation's own tool rules: each is checked against every call of its members.
MAX_ORG_TOOL_RULES = 64
MAX_LABEL = 100


async def caller(request: Request, scope: str | None = None) -> tuple[Services, Principal]:
    """The caller, whose credential holds ``scope`` (default: chat, which every credential holds)."""
    svc = services(request)
    return svc, await (svc.auth(request) if scope is None else svc.auth(request, scope))


async def admin_caller(request: Request) -> tuple[Services, Principal]:
    """An admin of the caller's organisation, on a credential with the ``admin`` scope (its web session)."""
    svc, user = await caller(request, ADMIN)
    if not user.admin:
        raise Forbidden("only an admin of your organisation may do this", code="admin_only")
    return svc, user


async def _org(svc: Services, principal: Principal) -> OrgRow:
    org = await svc.directory.org(principal.org_id)
    if org is None:  # a user made before organisations: its personal one has no row yet
        user = await svc.directory.user(principal.user_id)
        return OrgRow(principal.org_id, user.name if user else "", True, None, False)
    return org


async def _member(svc: Services, admin: Principal, user_id: str, *, erased: bool = False) -> UserRow:
    """A user of the admin's organisation, else 404; ``erased``: an erased one too (its erasure's routes)."""
    user = await svc.directory.user(user_id)
    if user is None or (user.erased and not erased) or user.org_id != admin.org_id:
        raise NotFound("no such user in your organisation", code="user_not_found")
    return user


async def _key(svc: Services, user_id: str, key_id: str) -> KeyRow:
    for key in await svc.directory.keys(user_id):
        if key.key_id == key_id:
            return key
    raise NotFound("no such key", code="key_not_found")


async def _new_key(svc: Services, user_id: str, body: dict[str, Any]) -> Response:
    only(body, {"label"}, "a key")
    label = string(body, "label", max_chars=MAX_LABEL, required=False)
    if label is None:
        raise Unprocessable("`label` must be a string")
    key_id, key, statements = new_key(user_id, "default" if label is MISSING else label)
    await svc.directory.apply(statements)
    created = next(k for k in await svc.directory.keys(user_id) if k.key_id == key_id)
    return JSONResponse({"key": created.public(), "api_key": key}, status_code=201)


async def _revoke(svc: Services, user_id: str, key_id: str) -> Response:
    key = await _key(svc, user_id, key_id)
    if key.revoked_at is None:
        await svc.directory.apply(revoke_key(user_id, key.key_id, key.key_hash))
    svc.auth.forget(None, [key.key_hash])  # at once here; on other gateways within the cache's bound
    return Response(status_code=204)


# ------------------------------------------------------------------ /v1/me


async def get_me(request: Request) -> Response:
    svc, me = await caller(request)
    user = await svc.directory.user(me.user_id)
    return JSONResponse({"user": user.public() if user else None, "org": (await _org(svc, me)).public()})


async def list_my_keys(request: Request) -> Response:
    svc, me = await caller(request, ACCOUNT)
    return JSONResponse({"keys": [k.public() for k in await svc.directory.keys(me.user_id)]})


async def create_my_key(request: Request) -> Response:
    svc, me = await caller(request, ACCOUNT)
    return await _new_key(svc, me.user_id, await json_body(request, svc.settings.max_body_bytes, required=False))


async def revoke_my_key(request: Request) -> Response:
    svc, me = await caller(request, ACCOUNT)
    return await _revoke(svc, me.user_id, request.path_params["key_id"])


async def erase_me(request: Request) -> Response:
    """Erase the caller and everything of theirs (gateway/erasure.py); ``?confirm=true`` is required, and
    the web session (a key cannot erase the account it belongs to). 202: the caller is refused from now on,
    so this answer is the last they get; the organisation's admins and the operator see the job end."""
    svc, me = await caller(request, ACCOUNT)
    _confirmed(request)
    user = await svc.directory.user(me.user_id)
    if user is None:
        raise NotFound("no such user", code="user_not_found")
    return JSONResponse(await erasure.request(svc, user, "self", trace_id(request)), status_code=202)


def _confirmed(request: Request) -> None:
    if request.query_params.get("confirm") != "true":
        raise Unprocessable(
            "erasure destroys every conversation, document and memory of the user for good; send ?confirm=true",
            code="confirmation_required",
        )


# ----------------------------------------------------------------- /v1/org


async def get_org(request: Request) -> Response:
    svc, me = await caller(request)
    return JSONResponse((await _org(svc, me)).public())


async def update_org(request: Request) -> Response:
    svc, admin = await admin_caller(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, {"name", "residency", "moderation_policy", "tool_rules"}, "an organisation")
    org = await _org(svc, admin)
    name = string(body, "name", max_chars=MAX_NAME, required=False)
    residency = string(body, "residency", max_chars=32, required=False)
    if residency not in (MISSING, None) and not (residency.isascii() and residency.replace("-", "").isalnum()):
        raise Unprocessable("`residency` is a label such as `eu` or `us-east`", code="invalid_residency")
    statements = [
        Statement(
            "UPDATE {ks}.orgs SET name = ?, residency = ?, personal = ? WHERE org_id = ?",
            (org.name if name is MISSING else name, org.residency if residency is MISSING else residency, org.personal, org.org_id),
        )
    ]
    if "moderation_policy" in body:
        if org.personal and body["moderation_policy"] is not None:
            # Its one user administers it: a policy there would be a user choosing their own moderation.
            raise Conflict("a personal organisation has its tier's moderation; only a team organisation adds its own", code="personal_org")
        statements.append(_policy_statement(org.org_id, body["moderation_policy"]))
    if "tool_rules" in body:
        statements.append(_tool_rules_statement(org.org_id, body["tool_rules"]))
    await svc.directory.apply(statements)
    return JSONResponse((await _org(svc, admin)).public())


def _tool_rules_statement(org_id: str, raw: Any) -> Statement:
    """The organisation's own rules for Parley's tools (null: none). They can deny, ask or scope a tool,
    never allow what the operator does not (streams/tool_policy.py); regular expressions are refused here:
    one organisation's pattern could stall the broker for every tenant."""
    if raw is None:
        return Statement("DELETE FROM {ks}.org_tool_rules WHERE org_id = ?", (org_id,))
    try:
        rules_from(raw, Layer.ORG)
    except RuleError as exc:
        raise Unprocessable(str(exc), code="invalid_tool_rules") from None
    if len(raw) > MAX_ORG_TOOL_RULES:
        raise Unprocessable(f"at most {MAX_ORG_TOOL_RULES} tool rules", code="invalid_tool_rules")
    return Statement(
        "INSERT INTO {ks}.org_tool_rules (org_id, rules, updated_at) VALUES (?, ?, ?)",
        (org_id, json.dumps(raw), datetime.now(timezone.utc)),
    )


def _policy_statement(org_id: str, raw: Any) -> Statement:
    """The organisation's own moderation (what blocks, at which scores), or back to its tier's (null)."""
    if raw is None:
        return Statement("DELETE FROM {ks}.org_policies WHERE org_id = ?", (org_id,))
    try:
        policy = org_policy_from(raw)
    except ValueError as exc:
        raise Unprocessable(str(exc), code="invalid_moderation_policy") from None
    return Statement(
        "INSERT INTO {ks}.org_policies (org_id, policy, updated_at) VALUES (?, ?, ?)",
        (org_id, json.dumps(policy.to_json()), datetime.now(timezone.utc)),
    )


async def list_members(request: Request) -> Response:
    svc, admin = await admin_caller(request)
    return JSONResponse({"users": [u.public() for u in await svc.directory.members(admin.org_id)]})


async def add_member(request: Request) -> Response:
    """``{"name", "role"?}`` → the new user, without a key: a key made here would be the admin's to read
    the member's content with. The member signs in (the organisation's OpenID provider, or an account from
    ``parley accounts create``) and makes their own."""
    svc, admin = await admin_caller(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, {"name", "role"}, "a user")
    if (await _org(svc, admin)).personal:
        raise Conflict("a personal organisation has one user; create a team organisation for more", code="personal_org")
    name = string(body, "name", max_chars=MAX_NAME)
    role = body.get("role", "member")
    if role not in ROLES:
        raise Unprocessable(f"`role` must be one of {', '.join(ROLES)}", code="invalid_role")
    user_id, _, statements = new_user(name, admin.tier, org_id=admin.org_id, role=role)
    await svc.directory.apply(statements)
    user = await svc.directory.user(user_id)
    return JSONResponse({"user": user.public() if user else None}, status_code=201)


async def update_member(request: Request) -> Response:
    """``{"disabled"?, "role"?}``. An admin cannot disable or demote itself (the org would be left
    without one of its admins by accident)."""
    svc, admin = await admin_caller(request)
    user = await _member(svc, admin, request.path_params["user_id"])
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, {"disabled", "role"}, "a user")
    disabled, role = body.get("disabled", user.disabled), body.get("role", user.role)
    if not isinstance(disabled, bool):
        raise Unprocessable("`disabled` must be true or false")
    if role not in ROLES:
        raise Unprocessable(f"`role` must be one of {', '.join(ROLES)}", code="invalid_role")
    if user.user_id == admin.user_id and (disabled or role != "admin"):
        raise Conflict("you cannot disable or demote yourself; ask another admin", code="self_demotion")
    await svc.directory.apply(
        [Statement("UPDATE {ks}.users SET disabled = ?, role = ? WHERE user_id = ?", (disabled, role, user.user_id))]
    )
    svc.auth.forget(user.user_id, [k.key_hash for k in await svc.directory.keys(user.user_id)])
    return JSONResponse((await _member(svc, admin, user.user_id)).public())


async def erase_member(request: Request) -> Response:
    """An admin erases a user of the organisation (not itself: that is ``DELETE /v1/me``); 202 with the job's
    status. A user already erased may be asked for again: the job repeats every step, harmlessly."""
    svc, admin = await admin_caller(request)
    user = await _member(svc, admin, request.path_params["user_id"], erased=True)
    _confirmed(request)
    if user.user_id == admin.user_id:
        raise Conflict("to erase yourself, use DELETE /v1/me", code="self_erasure")
    return JSONResponse(await erasure.request(svc, user, "admin", trace_id(request)), status_code=202)


async def member_erasure(request: Request) -> Response:
    """``GET /v1/org/users/{id}/erasure``: how far the user's newest erasure got (``erasure`` null: none asked)."""
    svc, admin = await admin_caller(request)
    user = await _member(svc, admin, request.path_params["user_id"], erased=True)
    return JSONResponse(await erasure.status(svc, user.user_id))


async def list_member_keys(request: Request) -> Response:
    svc, admin = await admin_caller(request)
    user = await _member(svc, admin, request.path_params["user_id"])
    return JSONResponse({"keys": [k.public() for k in await svc.directory.keys(user.user_id)]})


async def revoke_member_key(request: Request) -> Response:
    svc, admin = await admin_caller(request)
    user = await _member(svc, admin, request.path_params["user_id"])
    return await _revoke(svc, user.user_id, request.path_params["key_id"])


async def org_usage(request: Request) -> Response:
    """``GET /v1/org/usage?days=N``: each member's usage (counts only), and the organisation's total."""
    svc, admin = await admin_caller(request)
    days = parse_days(request.query_params.get("days"))
    q: quotas.Quotas = svc.quotas
    span = day_range(quotas.day_of(q.clock()), days)
    members = await svc.directory.members(admin.org_id)
    bound = asyncio.Semaphore(16)  # a member's usage is one multi-day read; an organisation is many members

    async def usage_of(user_id: str):  # type: ignore[no-untyped-def]
        async with bound:
            return await q.store.usage(user_id, span)

    usages = await asyncio.gather(*(usage_of(m.user_id) for m in members))
    out, total = [], Totals()
    for member, per_day_model in zip(members, usages):
        rows, totals = usage_json(per_day_model)
        out.append({"user_id": member.user_id, "usage": rows, "totals": totals_json(totals)})
        total = total + totals
    return JSONResponse(
        {"org_id": admin.org_id, "from": span[-1].isoformat(), "to": span[0].isoformat(), "users": out,
         "totals": totals_json(total)}
    )  # fmt: skip

