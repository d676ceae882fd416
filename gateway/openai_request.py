"""The OpenAI request, read into Parley's terms: messages, model, ids, the plan of appends (pure).

See gateway/openai_compat.py for the mapping as a whole.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gateway.errors import ApiError, BadRequest, NotFound, PayloadTooLarge
from gateway.openai_tools import parse_tool_calls, parse_tools, same_calls, tool_call_id
from gateway.sampling import FIELDS as SAMPLING_FIELDS
from gateway.sampling import check_min_tokens, json_schema_of, parse_sampling
from parley import ids
from schemas import sealing
from schemas.events import Sampling, ToolCall, Tools
from streams.router import AUTO

#: OpenAI's roles → the tree's. The legacy ``function`` role (before ``tool``) is not taken.
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
#: Largest ``max_tokens`` taken (an Avro int, and far past any pool's context).
MAX_TOKENS = 1_000_000
NAME_MAX = 200  # model names, the ``user`` field
#: Stored statuses of a reply whose text is final.
SETTLED = frozenset({"complete", "cancelled"})
#: Fields read into the turn (everything else is refused by name, unless it holds its neutral value below):
#: OpenAI's, and the sampling extensions SGLang's and vLLM's servers take (gateway/sampling.py FIELDS).
TAKEN = frozenset({
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "user", "n",
    "response_format", "tools", "tool_choice", "parallel_tool_calls", *SAMPLING_FIELDS,
})  # fmt: skip
#: Fields Parley does not implement, and the values that ask for nothing (clients send defaults).
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False), "top_logprobs": (None, 0), "logit_bias": (None, {}),
    "functions": (None, []), "function_call": (None, "none", "auto"), "store": (None, True), "metadata": (None, {}),
    "service_tier": (None, "auto", "default"), "modalities": (None, ["text"]), "audio": (None,),
    "prediction": (None,), "reasoning_effort": (None,), "web_search_options": (None,),
}  # fmt: skip
#: Why a field's value is refused, where "not supported" would not say enough.
REFUSALS = {
    "functions": "`functions` (the API before `tools`) is not supported: send the functions as `tools`",
    "function_call": "`function_call` (the API before `tools`) is not supported: use `tool_choice`",
    "store": "`store: false` is not supported: Parley keeps every conversation (it lists them, resumes replies "
    "and audits from them); delete one with DELETE /v1/conversations/{id}",
}


# ------------------------------------------------------------------ the request


@dataclass(frozen=True)
class ChatMessage:
    role: str  # system | user | assistant | tool
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls of the client's functions
    tool_call_id: str = ""  # a tool message's: the call it answers


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    end_user: str = ""  # OpenAI's ``user``: the caller's own end user
    sampling: Sampling = Sampling()
    tools: Tools | None = None  # the client's functions offered to the model


def invalid(message: str, param: str | None, *, code: str = "invalid_value") -> ApiError:
    error = BadRequest(message, code=code)
    error.param = param
    return error


def _optional(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise invalid(f"`{name}` has the wrong type", name, code="invalid_type")
    return value


def _text(value: str, param: str, max_chars: int) -> str:
    if len(value) > max_chars:
        too_long = PayloadTooLarge(f"`{param}` is longer than {max_chars} characters")
        too_long.param = param
        raise too_long
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape: not text
        raise invalid(f"`{param}` is not valid Unicode text", param) from None
    if "\x00" in value:
        raise invalid(f"`{param}` contains a NUL character", param)
    return value


def _content(value: Any, param: str, max_chars: int, *, optional: bool) -> str:
    """A message's text: a string (empty too, as OpenAI takes it), or a list of ``{"type": "text", "text"}``
    parts (joined); null or absent only where OpenAI allows it (``optional``: an assistant's), as ""."""
    if value is None and optional:
        return ""
    if isinstance(value, list) and value:
        texts = []
        for i, part in enumerate(value):
            text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None
            if not isinstance(text, str):
                raise invalid(f"`{param}[{i}]` must be a text part (`{{\"type\": \"text\", \"text\": …}}`)", f"{param}[{i}]")
            texts.append(text)
        return _text("".join(texts), param, max_chars)
    if not isinstance(value, str):
        raise invalid(f"`{param}` must be a string or a non-empty list of text parts", param, code="invalid_type")
    return _text(value, param, max_chars)


def _message(value: Any, i: int, max_chars: int) -> ChatMessage:
    param = f"messages[{i}]"
    if not isinstance(value, dict):
        raise invalid(f"`{param}` must be an object", param, code="invalid_type")
    role = value.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise invalid(f"`{param}.role` must be one of {', '.join(ROLES)}", f"{param}.role")
    if value.get("function_call"):
        raise invalid(REFUSALS["function_call"], f"{param}.function_call", code="unsupported_parameter")
    if value.get("tool_calls") and role != "assistant":
        raise invalid("only an assistant message has `tool_calls`", f"{param}.tool_calls")
    calls = parse_tool_calls(value.get("tool_calls"), f"{param}.tool_calls", invalid)
    call_id = ""
    if role == "tool" or value.get("tool_call_id") is not None:  # checked wherever it is sent, kept on a tool message
        call_id = tool_call_id(value.get("tool_call_id"), f"{param}.tool_call_id", invalid)
    content = _content(value.get("content"), f"{param}.content", max_chars, optional=role == "assistant")
    return ChatMessage(ROLES[role], content, calls, call_id if role == "tool" else "")


def parse_request(body: Mapping[str, Any], max_chars: int) -> ChatRequest:
    """The request's meaning, or the 4xx it deserves (each naming its ``param``)."""
    model = body.get("model")
    if not isinstance(model, str):
        code = "missing_field" if model is None else "invalid_type"
        raise invalid("`model` is required: a model name, or `auto`", "model", code=code)
    if len(model) > NAME_MAX:
        raise invalid(f"`model` is longer than {NAME_MAX} characters", "model")
    model = _text(model, "model", NAME_MAX)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise invalid("`messages` must be a non-empty list", "messages", code="missing_field" if raw is None else "invalid_value")
    messages = tuple(_message(m, i, max_chars) for i, m in enumerate(raw))
    if messages[-1].role not in ("user", "tool"):
        raise invalid("the last message must be the user's or a tool's result: it is the one answered", "messages")
    _check_results(messages)
    if _optional(body, "n", int) not in (None, 1):
        raise invalid("only `n` = 1 is supported", "n", code="unsupported_parameter")
    for name, value in body.items():
        if name in TAKEN:
            continue
        if name not in NEUTRAL:
            raise invalid(f"`{name}` is not a parameter Parley takes", name, code="unsupported_parameter")
        if value not in NEUTRAL[name]:
            raise invalid(REFUSALS.get(name, f"`{name}` is not supported"), name, code="unsupported_parameter")
    refuse = lambda message, param: invalid(message, param)  # noqa: E731
    tools = parse_tools(body, invalid)
    sampling = parse_sampling(body, refuse)
    json_schema = json_schema_of(body.get("response_format"), refuse)
    if json_schema is not None:
        sampling = replace(sampling, json_schema=json_schema)
    options = _optional(body, "stream_options", dict) or {}
    include_usage = _optional(options, "include_usage", bool)
    max_tokens = None
    for name in ("max_tokens", "max_completion_tokens"):  # the newer field wins when a client sends both
        value = _optional(body, name, int)
        if value is not None and not 1 <= value <= MAX_TOKENS:
            raise invalid(f"`{name}` must be between 1 and {MAX_TOKENS}", name)
        max_tokens = max_tokens if value is None else value
    check_min_tokens(sampling, max_tokens, refuse)
    end_user = _optional(body, "user", str) or ""
    if len(end_user) > NAME_MAX:
        raise invalid(f"`user` is longer than {NAME_MAX} characters", "user")
    return ChatRequest(
        model=model,
        messages=messages,
        stream=bool(_optional(body, "stream", bool)),
        include_usage=bool(include_usage),
        max_tokens=max_tokens,
        end_user=_text(end_user, "user", NAME_MAX),
        sampling=sampling,
        tools=tools,
    )


def _check_results(messages: Sequence[ChatMessage]) -> None:
    """Each tool message answers a call an assistant message before it made (OpenAI refuses the rest too)."""
    called: set[str] = set()
    for i, m in enumerate(messages):
        called.update(c.id for c in m.tool_calls)
        if m.role == "tool" and m.tool_call_id not in called:
            raise invalid("a tool message must answer a call of an assistant message before it", f"messages[{i}].tool_call_id")


def resolve_model(model: str, known: Any) -> str | None:
    """The user's model choice (None: the router's); 404 ``model_not_found`` for one no pool serves.

    ``known`` is the router's policy (``streams.router.Policy``): what it serves, the gateway knows.
    """
    name = model.strip()
    if name.lower() in AUTO:
        return None
    if known.pool_of_model(name) is None:
        served = ", ".join(sorted({p.model for p in known.pools.values()} | set(known.pools)))
        error = NotFound(f"the model `{name}` does not exist here; choose one of: auto, {served}", code="model_not_found")
        error.param = "model"
        raise error
    return name


# ------------------------------------------------------------------ ids and the plan


def message_keys(user_id: str, messages: Sequence[ChatMessage]) -> list[str]:
    """Each message's ``client_message_id``: a hash of the history up to and including it, keyed by the
    user's key (``sealing.blind``: the ids stay on chat.events for good, and once the key is destroyed
    they confirm no guess of a prompt). Awaits nothing: authentication fetched the user's key (gateway/auth.py)."""
    chain = hashlib.sha256()
    keys = []
    for m in messages:
        # A message of a tool conversation is also its calls or the call it answers (the others hash as before).
        part: list[Any] = [m.role, m.content]
        if m.tool_calls or m.tool_call_id:
            part += [[[c.id, c.name, c.arguments] for c in m.tool_calls], m.tool_call_id]
        chain.update(json.dumps(part, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        keys.append("openai:" + sealing.blind(user_id, "openai-chain:" + chain.copy().hexdigest()[:32]))
    return keys


def conversation_id_for(user_id: str, end_user: str, messages: Sequence[ChatMessage], keys: Sequence[str]) -> str:
    """One conversation per (user, end user, opening): the messages up to the first user message."""
    first_user = next(i for i, m in enumerate(messages) if m.role == "user")
    return str(uuid.uuid5(ids.NS, "openai:" + json.dumps([user_id, end_user, keys[first_user]])))


def after_deletion(conversation_id: str) -> str:
    """The conversation a history lands in once ``conversation_id`` was deleted: a new one, the same for every
    resend (so the next turn finds it), never the deleted one brought back."""
    return str(uuid.uuid5(ids.NS, "openai-after-deletion:" + conversation_id))


class Node(Protocol):
    """What the plan reads of a stored message (``gateway.store.MessageRow``)."""

    id: str
    parent_id: str | None
    role: str
    content: str
    status: str | None
    tool_calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Post:
    """A message of the history to append as MessagePosted."""

    message_id: str
    parent_id: str | None
    role: str
    content: str
    key: str  # its client_message_id
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True)
class Plan:
    conversation_id: str
    question_id: str  # the message answered (the history's last)
    question_key: str
    reply_key: str  # the GenerationRequested's client_message_id: the question's key and the call's
    reply_id: str
    #: Messages to append, oldest first (empty for a retried request).
    posts: tuple[Post, ...] = ()
    #: The reply exists already: a retried request, streamed again.
    replayed: bool = False
    #: A stored reply, not finished yet, that a history message (posted as new) may turn out to be.
    pending: str | None = None


def reply_key(question_key: str, idempotency_key: str | None) -> str:
    """The reply's key: the same for calls with one ``Idempotency-Key``, new for every call without one
    (a new sample: a sibling reply to the same question, whose prompt the engine has cached)."""
    return f"{question_key}|idem:{idempotency_key}" if idempotency_key else f"{question_key}|{uuid.uuid4().hex}"


def plan_turn(
    conversation_id: str, messages: Sequence[ChatMessage], keys: Sequence[str], stored: Sequence[Node], reply: str
) -> Plan:
    """Where the history sits in the conversation's tree, and what must be appended for its reply (``reply``:
    the reply's key, ``reply_key``)."""
    question_id = ids.user_message_id(conversation_id, keys[-1])
    reply_id = ids.reply_id(conversation_id, reply)
    if any(m.id == reply_id for m in stored):
        return Plan(conversation_id, question_id, keys[-1], reply, reply_id, replayed=True)
    known = {m.id for m in stored}
    posts: list[Post] = []
    pending: str | None = None
    parent: str | None = None
    for m, key in zip(messages, keys):
        mid = ids.user_message_id(conversation_id, key)
        if mid in known:  # appended by an earlier request (it keeps the parent it had then)
            parent = mid
        elif m.role == "assistant" and (found := _stored_reply(stored, parent, m)):
            parent = found
        else:
            if m.role == "assistant" and pending is None:
                pending = next((s.id for s in _replies_under(stored, parent) if s.status in (None, "streaming")), None)
            posts.append(Post(mid, parent, m.role, m.content, key, m.tool_calls, m.tool_call_id))
            parent = mid
    return Plan(conversation_id, question_id, keys[-1], reply, reply_id, tuple(posts), pending=pending)


def _replies_under(stored: Sequence[Node], parent: str | None) -> list[Node]:
    if parent is None:
        return []
    return [s for s in stored if s.parent_id == parent and s.role == "assistant"]


def _stored_reply(stored: Sequence[Node], parent: str | None, message: ChatMessage) -> str | None:
    """The finished reply under ``parent`` with exactly this text and these tool calls (the first such, as
    stored); an empty one is also a reply moderation withdrew (answered as ``content: null``, which a client
    appends as it got it)."""
    content = message.content
    same = [
        s.id
        for s in _replies_under(stored, parent)
        if (s.status in SETTLED and s.content == content and same_calls(s.tool_calls, message.tool_calls))
        or (s.status == "filtered" and content == "" and not message.tool_calls)
    ]
    return same[0] if same else None
