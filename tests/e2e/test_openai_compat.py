"""POST /v1/chat/completions through the whole stack, driven by the official `openai` client:
streamed and not, a growing history kept in one conversation (its second turn a prefix-cache
hit), an idempotent retry, refusals in OpenAI's error shape, the client's conversation passed
through as sent (no system prompt, nothing left out, no cap of Parley's), and a stream whose
client leaves cancelled."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from schemas.events import GenerationCompleted, InferenceRequested
from streams.settings import ContextSettings, RouterSettings
from tests.e2e.topic_events import events_of

OPENING = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Tell me about event sourcing, " + " ".join(f"word{i}" for i in range(60))},
]


def _client(stack: Any, key: str) -> openai.AsyncOpenAI:
    # No retries: each call here is one request, so what the test sees is what Parley answered.
    return openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)


async def _conversations(stack: Any, key: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}) as http:
        listed = await http.get("/v1/conversations")
        assert listed.status_code == 200, listed.text
        return listed.json()["conversations"]


async def _settled(stack: Any, key: str, cid: str, replies: int, timeout: float = 60) -> dict[str, Any]:
    """The conversation once ``replies`` finished replies are stored."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}) as http:
        while True:
            conv = (await http.get(f"/v1/conversations/{cid}")).json()
            done = [m for m in conv.get("messages", []) if m["role"] == "assistant" and m["status"] not in (None, "streaming")]
            if len(done) >= replies or time.monotonic() > deadline:
                return conv
            await asyncio.sleep(0.2)


async def test_a_growing_history_is_one_conversation_streamed_or_not(stack) -> None:
    key = stack.new_key("plus")
    client = _client(stack, key)
    try:
        first = await client.chat.completions.create(model="auto", messages=OPENING, max_tokens=20, user="e2e")
        assert first.object == "chat.completion" and first.id.startswith("chatcmpl-")
        answer = first.choices[0].message.content
        assert answer and first.choices[0].message.role == "assistant"
        assert first.choices[0].finish_reason in ("stop", "length")
        assert first.usage is not None and first.usage.completion_tokens > 0 and first.usage.prompt_tokens > 0

        history = [*OPENING, {"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
        stream = await client.chat.completions.create(
            model="auto", messages=history, stream=True, stream_options={"include_usage": True}, user="e2e"
        )
        chunks = [c async for c in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes in (["stop"], ["length"])
        usage = chunks[-1].usage
        assert chunks[-1].choices == [] and usage is not None and usage.completion_tokens > 0
        assert usage.prompt_tokens_details is not None
        cached = usage.prompt_tokens_details.cached_tokens or 0
        assert cached > 0, usage  # the first turn's prompt is the second's prefix: the engine still holds it
        print(f"second turn: {cached} of {usage.prompt_tokens} prompt tokens cached")  # a figure, not an assertion
    finally:
        await client.close()

    [listed] = await _conversations(stack, key)  # one conversation, not one per request
    conv = await _settled(stack, key, listed["id"], 2)
    messages = conv["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("system", OPENING[0]["content"]),
        ("user", OPENING[1]["content"]),
        ("assistant", answer),
        ("user", "And then?"),
        ("assistant", text),
    ]
    parents = [m["parent_id"] for m in messages]
    assert parents == [None, *(m["id"] for m in messages[:-1])], "one branch, through the reply Parley stored"
    assert first.id == f"chatcmpl-{messages[2]['id']}"


async def test_a_retried_request_returns_the_same_reply_and_appends_nothing(stack) -> None:
    """With an Idempotency-Key a retry finds its reply (usage as first counted); without one, a new sample."""
    key = stack.new_key("plus")
    client = _client(stack, key)
    messages = [{"role": "user", "content": "Say something, once."}]
    retry = {"Idempotency-Key": "say-something-1"}
    try:
        once = await client.chat.completions.create(model="small", messages=messages, max_tokens=20, extra_headers=retry)
        again = await client.chat.completions.create(model="small", messages=messages, max_tokens=20, extra_headers=retry)
        assert again.id == once.id and again.choices[0].message.content == once.choices[0].message.content
        assert again.usage is not None and once.usage is not None and once.usage.prompt_tokens > 0
        assert (again.usage.prompt_tokens, again.usage.completion_tokens) == (
            once.usage.prompt_tokens, once.usage.completion_tokens
        )
        stream = await client.chat.completions.create(
            model="small", messages=messages, max_tokens=20, stream=True, extra_headers=retry
        )
        chunks = [c async for c in stream]
        assert {c.id for c in chunks} == {once.id}
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == once.choices[0].message.content
        fresh = await client.chat.completions.create(model="small", messages=messages, max_tokens=20)  # no key: a new sample
        assert fresh.id != once.id
    finally:
        await client.close()
    [listed] = await _conversations(stack, key)
    conv = await _settled(stack, key, listed["id"], 2)
    question = next(m for m in conv["messages"] if m["role"] == "user")
    replies = [m for m in conv["messages"] if m["role"] == "assistant"]
    assert len(conv["messages"]) == 3 and {m["parent_id"] for m in replies} == {question["id"]}, "sibling replies"


async def test_refusals_are_in_openais_shape_and_append_nothing(stack) -> None:
    key = stack.new_key("plus")
    client = _client(stack, key)
    try:
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
        error = unknown.value.body
        assert isinstance(error, dict) and (error["code"], error["param"], error["type"]) == (
            "model_not_found", "model", "invalid_request_error"
        )
        with pytest.raises(openai.BadRequestError) as last:
            await client.chat.completions.create(model="auto", messages=[{"role": "assistant", "content": "Hi"}])
        assert isinstance(last.value.body, dict) and last.value.body["param"] == "messages"
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="auto", messages=[])
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "Hi"}], n=2)
    finally:
        await client.close()

    stranger = _client(stack, "not-a-key")
    try:
        with pytest.raises(openai.AuthenticationError) as denied:
            await stranger.chat.completions.create(model="auto", messages=[{"role": "user", "content": "Hi"}])
        assert isinstance(denied.value.body, dict) and denied.value.body["type"] == "authentication_error"
    finally:
        await stranger.close()

    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}) as http:
        broken = await http.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
        huge = {"model": "auto", "messages": [{"role": "user", "content": "x" * 40_000}]}
        too_long = await http.post("/v1/chat/completions", json=huge)
        assert too_long.status_code == 413, too_long.text
        assert set(too_long.json()["error"]) >= {"message", "type", "param", "code"}
    assert await _conversations(stack, key) == []


def _words(n: int, per_message: int = 3000) -> list[dict[str, str]]:
    """A history of ``n`` plain words (about a token each, to the engine and to Parley's counter), in user
    messages under the per-message limit, alternating with short assistant turns, ending with the user's."""
    out: list[dict[str, str]] = []
    while n > 0:
        if out:
            out.append({"role": "assistant", "content": "Noted."})
        out.append({"role": "user", "content": " ".join(["the"] * min(n, per_message))})
        n -= per_message
    return out


async def test_the_clients_conversation_reaches_the_engine_as_sent_and_uncapped(stack) -> None:
    """No system prompt or memory added, no turn left out past Parley's own budget, no cap of Parley's on the
    reply (the stack's PARLEY_CONTEXT_MAX_TOKENS is 40): the reply runs to the end of the pool's context; past
    the context the call is OpenAI's 400 context_length_exceeded, streamed or not."""
    budget = ContextSettings().budget_tokens
    context = RouterSettings().pool_context_tokens()["small"]
    key = stack.new_key("plus")
    client = _client(stack, key)
    history = _words(context - 150)  # far over Parley's own budget, just under the pool's context
    try:
        reply = await client.chat.completions.create(model="small", messages=history)
        assert reply.choices[0].finish_reason == "length" and reply.usage is not None
        assert reply.usage.completion_tokens > 40, reply.usage  # not Parley's default cap: the context's end
        assert reply.usage.prompt_tokens + reply.usage.completion_tokens <= context
        rid = reply.id.removeprefix("chatcmpl-")
        (asked,) = events_of(stack.kafka, "chat.inference", InferenceRequested, rid, lambda es: len(es) >= 1)
        assert [(m.role, m.content) for m in asked.messages] == [(m["role"], m["content"]) for m in history]
        assert asked.max_tokens == 0 and asked.prompt_tokens > budget

        too_long = _words(context + 100)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="auto", messages=too_long)
        assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "context_length_exceeded"
        stream = await client.chat.completions.create(model="auto", messages=too_long, stream=True)
        with pytest.raises(openai.APIError) as streamed:  # the stream began at once; its error ends it
            [c async for c in stream]
        assert streamed.value.code == "context_length_exceeded", streamed.value.body
    finally:
        await client.close()


async def test_a_stream_begins_at_once_and_a_client_that_leaves_cancels_its_reply(stack) -> None:
    """Headers and a comment before the first token; an OpenAI client cannot resume (it has no cursor), so a
    stream it leaves is cancelled at once, not after the gateway's abandonment grace."""
    key = stack.new_key("plus")
    body = {"model": "small", "messages": [{"role": "user", "content": "Tell me a long story."}], "stream": True,
            "max_tokens": 5000}
    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            lines = response.aiter_lines()
            assert (await anext(lines)).startswith(":")  # the comment, before anything of the reply
            rid = ""
            async for line in lines:
                if line.startswith("data: {"):
                    rid = json.loads(line[len("data: "):])["id"].removeprefix("chatcmpl-")
                    break
    assert rid
    (ended,) = events_of(stack.kafka, "chat.events", GenerationCompleted, rid, lambda es: len(es) >= 1)
    assert ended.finish_reason == "cancelled" and ended.usage.completion_tokens < 5000


async def test_a_deleted_conversation_stays_deleted_when_its_history_is_sent_again(stack) -> None:
    """Resending a deleted conversation's history starts a new conversation; the deleted one never comes back
    (no ghost row listed, no message rows rewritten)."""
    key = stack.new_key("plus")
    client = _client(stack, key)
    messages = [{"role": "user", "content": "Remember the lighthouse."}]
    try:
        await client.chat.completions.create(model="small", messages=messages, max_tokens=8)
        [first] = await _conversations(stack, key)
        await _settled(stack, key, first["id"], 1)
        async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}) as http:
            assert (await http.delete(f"/v1/conversations/{first['id']}")).status_code == 204
            again = await client.chat.completions.create(model="small", messages=messages, max_tokens=8)
            assert again.choices[0].message.content
            [second] = await _conversations(stack, key)
            assert second["id"] != first["id"]
            assert (await http.get(f"/v1/conversations/{first['id']}")).status_code == 404
            conv = await _settled(stack, key, second["id"], 1)
            assert [m["content"] for m in conv["messages"]][0] == messages[0]["content"]
            await client.chat.completions.create(model="small", messages=messages, max_tokens=8)  # and again: the same
            assert [c["id"] for c in await _conversations(stack, key)] == [second["id"]]
    finally:
        await client.close()


# ------------------------------------------------------------------ function calling (client-side tools)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _scripted(reply: str) -> str:
    """The synthetic engine's test-only directive: its whole reply is ``reply`` (workers/engine/synthetic.py)."""
    return f"[[reply:{base64.urlsafe_b64encode(reply.encode()).decode().rstrip('=')}]]"


#: The model calls the tool in the stack's pools' format (ChatML: Hermes), with a word of text before it.
CALLS_WEATHER = _scripted('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
ANSWER = "It is 21 degrees in Paris."


def _tool_result(call_id: str) -> dict[str, str]:
    """The client ran the tool: its result, which (being what the scripted model reads next) scripts the answer."""
    return {"role": "tool", "tool_call_id": call_id, "content": '{"temp_c": 21} ' + _scripted(ANSWER)}


def test_the_sync_client_runs_a_two_step_tool_conversation(stack) -> None:
    """The SDK offers a function; the model calls it (``message.tool_calls``, content null of markup); the client
    sends the result back; the model answers. The conversation is one branch, its reply keeping its call."""
    key = stack.new_key("plus")
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)
    question = [{"role": "user", "content": "What is the weather in Paris? " + CALLS_WEATHER}]
    first = client.chat.completions.create(model="auto", messages=question, tools=[WEATHER_TOOL], user="tools-sync")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content == "Let me look.\n"  # the text before the call; its markup never reaches the client
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})

    history = [*question, choice.message.model_dump(exclude_none=True), _tool_result(call.id)]
    second = client.chat.completions.create(model="auto", messages=history, tools=[WEATHER_TOOL], user="tools-sync")
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content == ANSWER
    assert not second.choices[0].message.tool_calls

    # Stored as it happened: question, the reply with its call, the tool's result, the answer — one branch.
    [conversation] = asyncio.run(_conversations(stack, key))
    stored = asyncio.run(_settled(stack, key, conversation["id"], replies=2))
    messages = stored["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"], messages
    assert messages[1]["tool_calls"] == [call.model_dump(exclude_none=True)]
    assert messages[2]["tool_call_id"] == call.id and messages[2]["parent_id"] == messages[1]["id"]
    assert messages[3]["content"] == ANSWER and messages[3]["parent_id"] == messages[2]["id"]
    client.close()


def test_the_streaming_client_gets_tool_call_deltas_as_openai_streams_them(stack) -> None:
    key = stack.new_key("plus")
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)
    question = [{"role": "user", "content": "Weather in Paris, please. " + CALLS_WEATHER}]
    asked = {"model": "auto", "tools": [WEATHER_TOOL], "tool_choice": "auto", "parallel_tool_calls": False}
    chunks = list(client.chat.completions.create(messages=question, stream=True, **asked))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    deltas = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert content == "Let me look.\n" and "<tool_call>" not in content
    head = deltas[0]
    assert (head.index, head.type) == (0, "function") and head.id and head.id.startswith("call_")
    assert head.function is not None and head.function.name == "get_weather" and head.function.arguments == ""
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"city": "Paris"} and {d.index for d in deltas} == {0}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    call = {"id": head.id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    history = [*question, {"role": "assistant", "content": content, "tool_calls": [call]}, _tool_result(head.id)]
    answer = list(client.chat.completions.create(messages=history, stream=True, **asked))
    assert "".join(c.choices[0].delta.content or "" for c in answer if c.choices) == ANSWER
    assert answer[-1].choices[0].finish_reason == "stop"
    assert not any(c.choices[0].delta.tool_calls for c in answer if c.choices)

    # A retried call (same Idempotency-Key) streams the same reply again, with the same call id.
    replay_key = {"Idempotency-Key": "tools-retry-1"}
    once = list(client.chat.completions.create(messages=question, stream=True, extra_headers=replay_key, **asked))
    again = list(client.chat.completions.create(messages=question, stream=True, extra_headers=replay_key, **asked))
    ids = [[t.id for c in s if c.choices for t in c.choices[0].delta.tool_calls or () if t.id] for s in (once, again)]
    assert ids[0] == ids[1] and len(ids[0]) == 1
    client.close()


async def test_the_async_client_streams_a_call_and_sends_its_result_back(stack) -> None:
    """``AsyncOpenAI`` (what async agents use): a streamed call gathered with ``async for``, then the result sent
    back whole and the answer read whole."""
    client = _client(stack, stack.new_key("plus"))
    question = [{"role": "user", "content": "Paris weather, async. " + CALLS_WEATHER}]
    stream = await client.chat.completions.create(model="auto", messages=question, tools=[WEATHER_TOOL], stream=True)
    deltas, finish, content = [], None, ""
    async for chunk in stream:
        if chunk.choices:
            deltas += chunk.choices[0].delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
            content += chunk.choices[0].delta.content or ""
    assert finish == "tool_calls" and deltas and deltas[0].id and deltas[0].function is not None
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert (deltas[0].function.name, json.loads(arguments)) == ("get_weather", {"city": "Paris"})
    call = {"id": deltas[0].id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    history = [*question, {"role": "assistant", "content": content, "tool_calls": [call]}, _tool_result(deltas[0].id)]
    answer = await client.chat.completions.create(model="auto", messages=history, tools=[WEATHER_TOOL])
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.content == ANSWER
    await client.close()


def test_a_tool_choice_naming_no_offered_function_is_refused_and_appends_nothing(stack) -> None:
    key = stack.new_key("plus")
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)
    question = [{"role": "user", "content": "Hi"}]
    with pytest.raises(openai.BadRequestError) as absent:
        client.chat.completions.create(
            model="auto", messages=question, tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_time"}}
        )
    assert isinstance(absent.value.body, dict) and absent.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model="auto", messages=question, tools=[{"type": "code_interpreter"}])  # type: ignore[list-item]
    assert isinstance(unknown.value.body, dict) and (unknown.value.body["param"], unknown.value.body["code"]) == (
        "tools[0].type", "unsupported_parameter"
    )
    assert asyncio.run(_conversations(stack, key)) == []
    client.close()


# ------------------------------------------------------------------ constrained output and benchmark extensions

PLACE = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"enum": ["FR", "DE", "JP"]}, "sights": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["city", "country", "sights"],
}  # fmt: skip


def test_response_format_and_a_forced_tool_call_are_valid_against_their_schemas(stack) -> None:
    """The engine constrains the reply: a response_format's JSON validates, and a named tool choice always comes back
    as a call of that function whose arguments validate (the synthetic engine draws them from the grammar)."""
    key = stack.new_key("plus")
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)
    question = [{"role": "user", "content": "Name a city and what to see there."}]
    shaped = client.chat.completions.create(
        model="auto", messages=question, max_tokens=400,
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE}},
    )  # fmt: skip
    assert shaped.choices[0].finish_reason == "stop", shaped
    jsonschema.validate(json.loads(shaped.choices[0].message.content or ""), PLACE)

    forced = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=400,
        tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    choice = forced.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None, choice
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])
    client.close()


async def test_benchmark_clients_sampling_extensions_travel_to_the_engine(stack) -> None:
    """What GuideLLM and vLLM/SGLang clients send beside OpenAI's fields (the SDK's extra_body) is taken and rides
    on the turn; a value out of range is a 400 naming it."""
    key = stack.new_key("plus")
    client = _client(stack, key)
    extensions = {"ignore_eos": True, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "stop_token_ids": [2], "min_tokens": 4}
    try:
        reply = await client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "Count."}], max_tokens=12, extra_body=extensions
        )
        assert reply.usage is not None and reply.usage.completion_tokens == 12  # ignore_eos: to the cap
        rid = reply.id.removeprefix("chatcmpl-")
        (asked,) = events_of(stack.kafka, "chat.inference", InferenceRequested, rid, lambda es: len(es) >= 1)
        carried = asked.sampling
        assert (carried.ignore_eos, carried.top_k, carried.min_p, carried.repetition_penalty) == (True, 20, 0.05, 1.1)
        assert (carried.stop_token_ids, carried.min_tokens) == ([2], 4)
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(model="small", messages=[{"role": "user", "content": "Hi"}], extra_body={"top_k": -5})
        assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "top_k"
    finally:
        await client.close()


def test_langchain_bind_tools_runs_a_tool_loop(stack) -> None:
    """LangChain's ``bind_tools`` (what its agents use): the model's call comes back as ``tool_calls`` on the
    AIMessage, a ToolMessage with the result goes back, the model answers."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return '{"temp_c": 21} ' + _scripted(ANSWER)

    key = stack.new_key("plus")
    llm = ChatOpenAI(base_url=f"{stack.url}/v1", api_key=key, model="auto", max_retries=0, timeout=60).bind_tools([get_weather])
    messages: list[Any] = [HumanMessage("What is the weather in Paris? " + CALLS_WEATHER)]
    called = llm.invoke(messages)
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [("get_weather", {"city": "Paris"})]
    messages += [called, ToolMessage(get_weather.invoke(called.tool_calls[0]["args"]), tool_call_id=called.tool_calls[0]["id"])]
    answered = llm.invoke(messages)
    assert answered.content == ANSWER and not answered.tool_calls


async def test_the_openai_agents_sdk_runs_a_strict_function_tool_to_an_answer(stack) -> None:
    """The Agents SDK, unchanged: its function tools are ``strict`` (the arguments must match the schema), which
    Parley holds with SGLang's structural tag; the runner calls the tool, sends its result, and ends on the answer."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # its traces would go to OpenAI's servers
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        ran.append(city)
        return '{"temp_c": 21} ' + _scripted(ANSWER)

    client = _client(stack, stack.new_key("plus"))
    agent = Agent(
        name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
        model=OpenAIChatCompletionsModel(model="auto", openai_client=client),
    )
    assert get_weather.strict_json_schema  # the SDK's default, which Parley once refused
    result = await Runner.run(agent, "What is the weather in Paris? " + CALLS_WEATHER, max_turns=4)
    assert ran == ["Paris"] and result.final_output == ANSWER
    await client.close()
