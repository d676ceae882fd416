"""Function calling on POST /v1/chat/completions' pure core: tools and tool choices read and bounded,
tool conversations placed on the tree, tool calls streamed and returned in OpenAI's shapes."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.errors import ApiError
from gateway.openai_reply import Delivery, Piece, completion, piece_of, shape_for, stream_chunks
from gateway.openai_request import message_keys, parse_request, plan_turn, reply_key
from gateway.openai_tools import SCHEMA_CHARS, SCHEMA_DEPTH
from schemas.events import (
    ConversationCreated,
    ConversationDeleted,
    GenerationCompleted,
    GenerationRequested,
    MessagePosted,
    ToolCall,
    ToolFunction,
    Tools,
)
from schemas import sealing
from streams import projection, tree
from streams.context_tokens import TokenCounter
from streams.prompt import as_sent
from streams.store import state_from_rows, tool_use

MAX = 10_000
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp": 21}'},
]


_UNIT = {"type": "object", "properties": {"u": {"$ref": "#/$defs/unit"}}}
CLASHING = {"type": "function", "function": {"name": "other", "parameters": {**_UNIT, "$defs": {"unit": {"type": "string"}}}}}
WEATHER_UNIT = {"type": "function", "function": {"name": "get_weather", "parameters": {**_UNIT, "$defs": {"unit": {"type": "integer"}}}}}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER], **extra}


def refused(**change: Any) -> ApiError:
    with pytest.raises(ApiError) as raised:
        parse_request(body(**change), MAX)
    assert raised.value.status == 400
    return raised.value


def test_tools_and_tool_choices_are_read_as_openai_clients_send_them() -> None:
    chat = parse_request(body(tool_choice="required", parallel_tool_calls=False), MAX)
    assert chat.tools is not None and [f.name for f in chat.tools.functions] == ["get_weather"]
    assert json.loads(chat.tools.functions[0].parameters)["required"] == ["city"]
    assert (chat.tools.choice, chat.tools.function, chat.tools.parallel) == ("required", "", False)
    named = parse_request(body(tool_choice={"type": "function", "function": {"name": "get_weather"}}), MAX).tools
    assert named is not None and (named.choice, named.function, named.parallel) == ("function", "get_weather", True)
    assert parse_request(body(), MAX).tools.choice == "auto"  # type: ignore[union-attr]
    assert parse_request(body(tools=[], tool_choice="none"), MAX).tools is None  # clients' defaults ask for nothing
    bare = {"type": "function", "function": {"name": "ping"}}  # no parameters: a function of no arguments
    assert parse_request(body(tools=[bare]), MAX).tools.functions[0].parameters == ""  # type: ignore[union-attr]


def test_a_tool_conversation_is_read_with_its_calls_and_results() -> None:
    chat = parse_request(body(messages=CONVERSATION), MAX)
    assistant, tool = chat.messages[1], chat.messages[2]
    assert (assistant.role, assistant.content) == ("assistant", "")
    assert assistant.tool_calls == (ToolCall(id="call_abc", name="get_weather", arguments='{"city":"Paris"}'),)
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "call_abc", '{"temp": 21}')


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type", "unsupported_parameter"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_parameter"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type", "unsupported_parameter"),
        ({"tools": {"get_weather": WEATHER}}, "tools", "invalid_type"),
        ({"tools": [WEATHER] * 129}, "tools", "invalid_value"),
        ({"tools": [WEATHER, WEATHER]}, "tools", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "rm -rf /"}}]}, "tools[0].function.name", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools[0].function.name", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]}, "tools[0].function.description", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]}, "tools[0].function.parameters", "invalid_type"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]}, "tools[0].function.parameters", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, "tools[0].function.strict", "invalid_type"),
        ({"tool_choice": {"type": "function", "function": {"name": "absent"}}}, "tool_choice", "invalid_value"),
        ({"tool_choice": "always"}, "tool_choice", "invalid_value"),
        ({"tool_choice": {"type": "function"}}, "tool_choice", "invalid_value"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice", "invalid_value"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls", "invalid_type"),
        ({"functions": [WEATHER["function"]]}, "functions", "unsupported_parameter"),
        ({"function_call": {"name": "get_weather"}}, "function_call", "unsupported_parameter"),
        # Forced, the calls are constrained to one schema of both functions: their definitions cannot clash.
        ({"tools": [WEATHER_UNIT, CLASHING], "tool_choice": "required"}, "tools", "invalid_value"),
    ],
)
def test_bad_tools_are_refused_naming_the_parameter(change: dict[str, Any], param: str, code: str) -> None:
    error = refused(**change)
    assert (error.param, error.code) == (param, code)


def test_hostile_schemas_are_refused_before_anything_reads_them_deeply() -> None:
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(400)}}
    assert "characters" in str(refused(tools=[{"type": "function", "function": {"name": "f", "parameters": huge}}]))
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(SCHEMA_DEPTH + 5):
        deep = {"type": "object", "properties": {"a": deep}}
    assert len(json.dumps(deep)) < SCHEMA_CHARS
    assert "nests deeper" in str(refused(tools=[{"type": "function", "function": {"name": "f", "parameters": deep}}]))


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "call_none", "content": "r"}], "messages[1].tool_call_id"),
        ([{"role": "user", "content": "q", "tool_calls": [CALL]}], "messages[0].tool_calls"),
        ([*CONVERSATION[:1], {"role": "assistant", "tool_calls": [{"id": "c", "type": "retrieval"}]}, CONVERSATION[0]], "messages[1].tool_calls[0]"),
        ([*CONVERSATION[:1], {"role": "assistant", "tool_calls": [{**CALL, "id": ""}]}, CONVERSATION[0]], "messages[1].tool_calls[0].id"),
        ([*CONVERSATION[:1], {"role": "assistant", "tool_calls": "x"}, CONVERSATION[0]], "messages[1].tool_calls"),
        ([*CONVERSATION[:1], {"role": "assistant", "function_call": {"name": "f"}}, CONVERSATION[0]], "messages[1].function_call"),
        (CONVERSATION[:2], "messages"),  # the last message is the assistant's: nothing to answer
    ],
)
def test_bad_tool_conversations_are_refused_naming_the_message(messages: list[dict[str, Any]], param: str) -> None:
    assert refused(messages=messages).param == param


@dataclass(frozen=True)
class Node:
    id: str
    parent_id: str | None
    role: str
    content: str
    status: str | None = "complete"
    tool_calls: tuple[ToolCall, ...] = ()


CID = "7d0f8a5e-2a43-4b8e-9c8e-0d1f3b1f6a10"


def test_a_tool_conversation_continues_through_the_reply_that_made_the_call() -> None:
    first = parse_request(body(messages=CONVERSATION[:1]), MAX).messages
    keys = message_keys("u1", first)
    turn1 = plan_turn(CID, first, keys, [], reply_key(keys[-1], "k1"))
    call = ToolCall(id="call_abc", name="get_weather", arguments='{"city":"Paris"}')
    stored = [Node(p.message_id, p.parent_id, p.role, p.content) for p in turn1.posts]
    stored.append(Node(turn1.reply_id, turn1.question_id, "assistant", "", tool_calls=(call,)))
    second = parse_request(body(messages=CONVERSATION), MAX).messages
    keys2 = message_keys("u1", second)
    plan = plan_turn(CID, second, keys2, stored, reply_key(keys2[-1], "k2"))
    assert [(p.role, p.tool_call_id) for p in plan.posts] == [("tool", "call_abc")]  # only the result is new
    assert plan.posts[0].parent_id == turn1.reply_id
    # Other calls (another id, other arguments) are another branch, posted with their calls.
    other = [*CONVERSATION[:1], {"role": "assistant", "tool_calls": [{**CALL, "id": "call_other"}]},
             {"role": "tool", "tool_call_id": "call_other", "content": "r"}]  # fmt: skip
    changed = parse_request(body(messages=other), MAX).messages
    keys3 = message_keys("u1", changed)
    forked = plan_turn(CID, changed, keys3, stored, reply_key(keys3[-1], "k3"))
    assert [p.role for p in forked.posts] == ["assistant", "tool"] and forked.posts[0].tool_calls[0].id == "call_other"


def test_keys_tell_tool_messages_apart_and_keep_plain_histories_as_they_were() -> None:
    chat = parse_request(body(messages=CONVERSATION), MAX).messages
    other = parse_request(body(messages=[*CONVERSATION[:2], {**CONVERSATION[2], "tool_call_id": "call_abc"}]), MAX).messages
    assert message_keys("u1", chat) == message_keys("u1", other)
    args = [*CONVERSATION[:1], {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "get_weather", "arguments": "{}"}}]}, CONVERSATION[2]]
    assert message_keys("u1", parse_request(body(messages=args), MAX).messages)[1] != message_keys("u1", chat)[1]


OPENAI_CALLS = (
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'}},
)


def test_a_done_event_with_calls_finishes_tool_calls() -> None:
    done = piece_of("done", {"finish_reason": "stop", "usage": {}, "tool_calls": list(OPENAI_CALLS)}, Delivery())
    assert done is not None and done.finish_reason == "tool_calls" and done.tool_calls == OPENAI_CALLS
    cut = piece_of("done", {"finish_reason": "length", "usage": {}, "tool_calls": list(OPENAI_CALLS)}, Delivery())
    assert cut is not None and cut.finish_reason == "length"


async def test_streamed_calls_assemble_as_an_openai_client_assembles_them() -> None:
    async def rest() -> AsyncIterator[Piece]:
        yield Piece(finish_reason="tool_calls", usage={}, tool_calls=OPENAI_CALLS)

    out = [d async for d in stream_chunks(shape_for("r1", "small", 0), Piece(text="Checking. "), rest(), False)]
    assert out[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(d)) for d in out[:-1]]
    content, calls = "", {}  # as the SDK's stream helpers and LangChain accumulate deltas
    for c in chunks:
        delta = c.choices[0].delta
        content += delta.content or ""
        for t in delta.tool_calls or ():
            slot = calls.setdefault(t.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = t.id or slot["id"]
            slot["name"] += (t.function.name or "") if t.function else ""
            slot["arguments"] += (t.function.arguments or "") if t.function else ""
    assert content == "Checking. "
    assert calls == {
        0: {"id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        1: {"id": "call_2", "name": "get_weather", "arguments": '{"city":"Tokyo"}'},
    }
    heads = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert [(h.index, h.id, h.type) for h in heads] == [(0, "call_1", "function"), (0, None, None), (1, "call_2", "function"), (1, None, None)]
    assert heads[0].function is not None and heads[0].function.arguments == ""  # the first chunk names the call
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_completion_that_calls_tools_has_null_content() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}}
    parsed = ChatCompletion.model_validate(completion(shape_for("r1", "m", 0), "", "tool_calls", usage, OPENAI_CALLS))
    message = parsed.choices[0].message
    assert message.content is None and parsed.choices[0].finish_reason == "tool_calls"
    assert [(t.id, t.function.name) for t in message.tool_calls or ()] == [("call_1", "get_weather"), ("call_2", "get_weather")]
    plain = completion(shape_for("r1", "m", 0), "Hi", "stop", usage)
    assert "tool_calls" not in plain["choices"][0]["message"]


def test_a_tool_conversation_is_folded_projected_read_back_and_prompted_with_its_calls() -> None:
    """The calls and results a history holds, and those a reply made, survive the fold, the projection's row and
    a cold load of it, and reach the prompt the worker renders."""
    common = {"conversation_id": CID, "user_id": "u1"}
    m1, r1, m2 = (str(uuid.UUID(int=i)) for i in (1, 2, 3))
    call = ToolCall(id="call_abc", name="get_weather", arguments='{"city":"Paris"}')
    question = MessagePosted(**common, message_id=m1, client_message_id="k1", content="Weather?")
    asked = GenerationRequested(**common, request_id=r1, parent_id=m1, client_message_id="k1|x", as_sent=True)
    reply = GenerationCompleted(**common, request_id=r1, parent_id=m1, finish_reason="stop", content="", tool_calls=[call])
    result = MessagePosted(**common, message_id=m2, parent_id=r1, client_message_id="k2", role="tool", content="21 C", tool_call_id="call_abc")
    before_reply = tree.fold([ConversationCreated(**common), question, asked])
    state = tree.fold([result], tree.apply(before_reply, reply))
    on_branch = tree.branch(state, m2)
    assert [(m.role, m.tool_calls, m.tool_call_id) for m in on_branch] == [("user", (), ""), ("assistant", (call,), ""), ("tool", (), "call_abc")]

    reply_cell = dict(projection.writes_for(before_reply, reply, sealing.sealer())[0].cells)["tool_use"]
    result_cell = dict(projection.writes_for(tree.apply(before_reply, reply), result, sealing.sealer())[0].cells)["tool_use"]
    assert (tool_use(reply_cell), tool_use(result_cell), tool_use(None)) == (((call,), ""), ((), "call_abc"), ((), ""))
    rows = [
        SimpleNamespace(message_id=mid, parent_id=parent, role=role, content=text, status="complete", finish_reason=None,
                        created_at=None, document_ids=None, moderation=None, tool_use=cell)
        for mid, parent, role, text, cell in [(m1, None, "user", "Weather?", None), (r1, m1, "assistant", "", reply_cell),
                                              (m2, r1, "tool", "21 C", result_cell)]
    ]  # fmt: skip
    cold = state_from_rows(CID, None, rows)
    assert cold.messages[r1].tool_calls == (call,) and cold.messages[m2].tool_call_id == "call_abc"

    tools = Tools(functions=[ToolFunction(name="get_weather", parameters='{"type":"object"}')])
    prompt = as_sent(on_branch, TokenCounter.from_spec("bytes"), tools)
    assert [(m.role, m.tool_calls, m.tool_call_id) for m in prompt.messages] == [
        ("user", [], ""), ("assistant", [call], ""), ("tool", [], "call_abc")
    ]
    assert prompt.prompt_tokens > as_sent(on_branch, TokenCounter.from_spec("bytes")).prompt_tokens  # the functions count
    deleted = projection.writes_for(state, ConversationDeleted(**common), sealing.sealer())
    assert [dict(w.cells)["tool_use"] for w in deleted if w.table == "messages"] == ["", "", ""]  # purged with the text


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f", "description": 0}}]}, "tools[0].function.description"),
        ({"messages": [{"role": "user", "content": "q", "tool_call_id": 5}]}, "messages[0].tool_call_id"),
        ([*CONVERSATION[:1], {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}, CONVERSATION[0]],
         "messages[1].tool_calls[0].function.arguments"),
    ],
)
def test_values_of_the_wrong_type_are_refused_even_where_they_would_be_ignored(change: Any, param: str) -> None:
    """What the OpenAPI document calls invalid is refused, never quietly taken (the fuzzer holds the gateway to it)."""
    assert refused(**(change if isinstance(change, dict) else {"messages": change})).param == param
