"""Server-side tool calls at the gateway (DESIGN.md §13): what a turn offers, what its calls became, and
the owner's answers to the calls the permission broker asked about.

- ``tools`` on POST /v1/conversations/{id}/messages: names of the operator's tools (parley/tool_registry.py)
  or of the caller's organisation's MCP servers (parley/org_tools.py; the operator's name wins); an unknown
  name, or one of another organisation's, is a 422 naming it. The model is offered them; the broker, never
  the model, decides whether a call runs.
- GET /v1/conversations/{id}/tool-calls: every call of the conversation, its decision (and the rule that
  made it), its state and result. Only the owner; a conversation of someone else's is a 404.
- POST /v1/conversations/{id}/tool-calls/{call_id} ``{"answer": "approve" | "reject" | "edit", "arguments":
  {...}}``: only the owner, only a call in state ``asked`` (else 409); edited arguments must be a JSON object
  (the broker judges them again: a deny rule still wins). The answer is an event: any gateway takes it, it
  survives restarts, and the first answer on the log counts.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import Conflict, NotFound, PayloadTooLarge, Unprocessable
from gateway.services import services, trace_id
from gateway.validation import json_body, only, string
from parley.errors import ConfigError
from parley.org_tools import OrgTools
from parley.tool_registry import ToolConfig
from schemas.events import ToolCallAnswered, ToolFunction, Tools

#: Tools one turn may offer.
MAX_TOOLS = 16
#: Edited arguments, as JSON text.
MAX_ARGUMENTS_BYTES = 64 * 1024
ANSWER_FIELDS = frozenset({"answer", "arguments"})


async def offered(config: ToolConfig, org_tools: OrgTools | None, org_id: str, named: Any) -> Tools | None:
    """The ``tools`` of a posted message as the turn's offer; None when it names none. 422 for a bad list.
    The organisation's tools are read only when a name is not the operator's."""
    if named is None or named == []:
        return None
    if not isinstance(named, list) or not all(isinstance(n, str) for n in named) or len(named) > MAX_TOOLS:
        raise Unprocessable(f"`tools` is a list of at most {MAX_TOOLS} tool names", code="invalid_tools")
    if org_tools is not None and org_id and any(n not in config.tools for n in named):
        config = dataclasses.replace(config, tools={**await org_tools.specs(org_id), **config.tools})
    try:
        specs = config.offered(named)
    except ConfigError as exc:
        raise Unprocessable(str(exc), code="unknown_tool") from None
    return Tools(
        functions=[ToolFunction(name=s.name, description=s.description, parameters=json.dumps(dict(s.parameters))) for s in specs],
        runner="parley",
    )


def _call_json(c: Any) -> dict[str, Any]:
    return {
        "id": c.call_id,
        "reply_id": c.request_id,
        "name": c.name,
        "arguments": c.arguments,
        "decision": c.decision,
        "rule": c.rule,
        "reason": c.reason,
        "state": c.state,
        "outcome": c.outcome or None,
        "result": c.result if c.state == "finished" else None,
        "error": c.error or None,
    }


async def list_tool_calls(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    calls = await svc.tool_calls.calls(conversation.id)
    return JSONResponse({"tool_calls": [_call_json(c) for c in calls if c.user_id == user.user_id]})


async def answer_tool_call(request: Request) -> Response:
    svc = services(request)
    user = await svc.auth(request)
    body = await json_body(request, svc.settings.max_body_bytes)
    only(body, ANSWER_FIELDS, "an answer")
    answer = string(body, "answer", max_chars=16)
    if answer not in ("approve", "reject", "edit"):
        raise Unprocessable("`answer` is approve, reject or edit", code="invalid_answer")
    arguments = ""
    if answer == "edit":
        edited = body.get("arguments")
        if not isinstance(edited, dict):
            raise Unprocessable("an edit sends `arguments`, a JSON object", code="invalid_arguments")
        arguments = json.dumps(edited, separators=(",", ":"))
        if len(arguments.encode()) > MAX_ARGUMENTS_BYTES:
            raise PayloadTooLarge(f"`arguments` is at most {MAX_ARGUMENTS_BYTES} bytes as JSON")
    elif "arguments" in body:
        raise Unprocessable("`arguments` goes with an edit only", code="invalid_arguments")
    conversation = await svc.owned(user, request.path_params["conversation_id"])
    call_id = request.path_params["call_id"]
    call = next((c for c in await svc.tool_calls.calls(conversation.id) if c.call_id == call_id), None)
    if call is None or call.user_id != user.user_id:
        raise NotFound("no such tool call in this conversation", code="tool_call_not_found")
    if call.state != "asked":
        raise Conflict(f"this call is not waiting for an answer (it is {call.state})", code="not_asked")
    await svc.append(
        ToolCallAnswered(
            conversation_id=conversation.id, user_id=user.user_id, trace_id=trace_id(request),
            request_id=call.request_id, call_id=call_id, answer=answer, arguments=arguments,
        )
    )
    return JSONResponse({"id": call_id, "answer": answer}, status_code=202)
