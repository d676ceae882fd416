"""An organisation's MCP servers: ``/v1/org/tools`` (DESIGN.md §13; parley/org_tools.py).

- ``GET /v1/org/tools`` (any member, ``chat``): the servers and the tools a member may name in a turn's ``tools``.
- ``POST /v1/org/tools {"name", "url"}`` (an admin, on the web session): Parley asks the server at ``url`` for
  its tools (streamable HTTP, the official ``mcp`` SDK) through the SSRF guard (workers/net_guard.py: a
  loopback, private, link-local or otherwise non-global address is refused unless the operator's
  ``fetch.allow_networks`` opens it) and keeps them as ``<name>_<tool>``. The same name again replaces the
  server (a refreshed listing). 201 with what was kept.
- ``DELETE /v1/org/tools/{name}`` (an admin): its tools are offered no more, and a call already cleared ends
  ``error`` ("no longer registered"). A name the organisation has not registered is a 404.

What a hostile value does: a URL at a refused address is a 422 naming the rule (never the address, never
connected to); a server that does not answer or speaks no MCP is a 422 too (the URL given leads to no
server Parley can use: the caller's value, not Parley's fault); a listing Parley will not carry
(too many tools, a schema that is not one, a remote ``$ref``) is a 422 naming the tool and the problem; a
name the operator's tools file already holds is a 409; past ``MAX_SERVERS``, 409. Nothing is kept on any
refusal. The tools are never read-only: with no rule, every call of one is asked.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin import admin_caller, caller
from gateway.errors import Conflict, NotFound, Unprocessable
from gateway.validation import json_body, only, string
from workers.org_mcp import NotRegistered, register


async def list_org_tools(request: Request) -> Response:
    svc, me = await caller(request)
    servers = await svc.org_tools.servers(me.org_id) if me.org_id else []
    return JSONResponse({"servers": [s.public() for s in servers]})


async def add_org_tools(request: Request) -> Response:
    svc, admin = await admin_caller(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, {"name", "url"}, "an MCP server")
    name = string(body, "name", max_chars=32)
    url = string(body, "url", max_chars=2048)
    try:
        kept = await register(
            svc.org_tools, admin.org_id, name, url, operator_tools=svc.tools.tools, allow_networks=svc.tools.allow_networks
        )
    except NotRegistered as exc:
        raise (Conflict if exc.conflict else Unprocessable)(str(exc), code=exc.code) from None
    return JSONResponse(kept.public(), status_code=201)


async def remove_org_tools(request: Request) -> Response:
    svc, admin = await admin_caller(request)
    name = request.path_params["name"]
    if name not in {s.name for s in await svc.org_tools.servers(admin.org_id)}:
        raise NotFound("no MCP server of that name in your organisation", code="server_not_found")
    await svc.org_tools.remove(admin.org_id, name)
    return Response(status_code=204)
