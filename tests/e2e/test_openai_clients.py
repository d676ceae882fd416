"""Clients no one here wrote, against the whole stack serving the real model (SmolLM2 on the CPU engine).

The official ``openai`` SDK, sync and async, streaming and ``with_raw_response``,
and LangChain's ``ChatOpenAI``: they list the models, read replies in readable
English, and get what OpenAI-compatible servers give — ``temperature=0`` with a
``seed`` answers the same twice, ``temperature=1`` samples anew on every call
(no ``Idempotency-Key``), an option Parley does not take is a 400 naming it, and
structured output and a forced tool call come back valid against their schemas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest
from langchain_openai import ChatOpenAI

from parley.settings import CassandraSettings, KafkaSettings, from_env
from tools import isolated
from tools.topology import CHAT_PATH

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: The CPU engine's default backend (SmolLM2); short replies keep each call to a second or two on two cores.
REAL_ENV = {"PARLEY_CONTEXT_MAX_TOKENS": "24"}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STORY = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 60}, "mood": {"enum": ["calm", "stormy"]}, "keeper_age": {"type": "integer"}},
    "required": ["title", "mood", "keeper_age"],
    "additionalProperties": False,
}  # fmt: skip
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def real(infra, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(base URL of the OpenAI API, an API key) of a stack of its own serving SmolLM2."""
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "clients")
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("clients-logs"), REAL_ENV, CHAT_PATH)
    try:
        _, key = inner.create_user("clients", "plus")
        yield f"{inner.url}/v1", key
    finally:
        inner.stop()
        isolated.drop(kafka, cassandra)


def mostly_words(text: str) -> bool:
    """Readable text, not bytes: printable, and most whitespace-separated pieces are words."""
    pieces = text.split()
    wordy = [p for p in pieces if p.strip(".,;:!?\"'()").isalpha()]
    return bool(pieces) and text.isprintable() and len(wordy) >= 0.7 * len(pieces)


def test_the_sync_client_lists_models_and_streams_a_readable_reply(real) -> None:
    url, key = real
    client = openai.OpenAI(base_url=url, api_key=key)
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "auto" and MODEL in ids
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")

    stream = client.chat.completions.create(model="auto", messages=QUESTION, stream=True, temperature=0, seed=1)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert mostly_words(text) and "paris" in text.lower(), text
    assert {c.model for c in chunks} == {MODEL}, "every chunk names the model that answered"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")

    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=QUESTION, temperature=0, seed=1)
    assert raw.http_response.status_code == 200 and raw.headers["content-type"].startswith("application/json")
    completion = raw.parse()
    assert completion.model == MODEL and completion.choices[0].message.content == text
    assert completion.usage is not None and completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0


async def test_the_async_client_samples_as_asked(real) -> None:
    url, key = real
    client = openai.AsyncOpenAI(base_url=url, api_key=key)
    try:
        story = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}]

        async def ask(**sampling: object) -> str:
            reply = await client.chat.completions.create(model="auto", messages=story, max_tokens=24, **sampling)
            return reply.choices[0].message.content or ""

        seeded = [await ask(temperature=0, seed=42) for _ in range(2)]
        assert seeded[0] == seeded[1] and mostly_words(seeded[0])
        sampled = {await ask(temperature=1.0) for _ in range(3)}
        assert len(sampled) > 1, "temperature 1 without an Idempotency-Key samples anew on every call"

        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="auto", messages=story, logit_bias={"1": 5})
        assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "logit_bias"
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(model="auto", messages=story, temperature=3)
        assert isinstance(bad.value.body, dict) and bad.value.body["param"] == "temperature"
        # Structured output travels to the engine as SGLang's json_schema, and the CPU engine constrains SmolLM2 to it.
        shape = {"name": "story", "schema": STORY}
        shaped = await client.chat.completions.create(
            model="auto", messages=story, max_tokens=150, temperature=0, response_format={"type": "json_schema", "json_schema": shape}
        )
        jsonschema.validate(json.loads(shaped.choices[0].message.content or ""), STORY)
        # A named tool choice: SmolLM2's call of it, its arguments valid against the function's schema.
        forced = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "What is the weather in Paris?"}], max_tokens=100,
            tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )  # fmt: skip
        [call] = forced.choices[0].message.tool_calls or []
        assert forced.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    finally:
        await client.close()


def test_langchain_chat_openai_invokes_and_streams(real) -> None:
    url, key = real
    chat = ChatOpenAI(base_url=url, api_key=key, model=MODEL, temperature=0, max_tokens=24)
    answer = chat.invoke("What is the capital of France?")
    assert mostly_words(str(answer.content)) and "paris" in str(answer.content).lower(), answer.content
    assert answer.response_metadata.get("model_name") == MODEL
    streamed = "".join(str(part.content) for part in chat.stream("What is the capital of France?"))
    assert streamed == answer.content


def test_langchain_bind_tools_with_a_forced_choice_runs_a_tool_loop_on_smollm2(real) -> None:
    """LangChain's ``bind_tools`` naming the tool (``tool_choice``): SmolLM2's call comes back with arguments valid
    against the tool's schema (the engine constrains them), the result goes back, and SmolLM2 answers in words."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: str) -> str:
        """The current weather in a city."""
        return f"21 degrees {unit} and sunny in {city}"

    url, key = real
    chat = ChatOpenAI(base_url=url, api_key=key, model=MODEL, temperature=0, max_tokens=120, max_retries=0, timeout=120)
    forced = chat.bind_tools([WEATHER], tool_choice="get_weather")
    messages: list[object] = [HumanMessage("What is the weather in Paris?")]
    called = forced.invoke(messages)
    [call] = called.tool_calls
    assert call["name"] == "get_weather"
    jsonschema.validate(call["args"], WEATHER["function"]["parameters"])
    messages += [called, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    answered = chat.bind_tools([WEATHER]).invoke(messages)  # the choice is the model's again: it answers
    assert isinstance(answered.content, str) and answered.content.strip()


async def test_the_openai_agents_sdk_runs_a_required_tool_to_an_answer_on_smollm2(real) -> None:
    """The Agents SDK with ``tool_choice="required"`` (its strict schemas, its own loop, which lets the model
    choose again after the first call): SmolLM2 calls the tool with valid arguments, the SDK runs it, and the
    run ends on an answer."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # its traces would go to OpenAI's servers
    ran: list[tuple[str, str]] = []

    @function_tool
    def get_weather(city: str, unit: str) -> str:
        """The current weather in a city; unit is celsius or fahrenheit."""
        ran.append((city, unit))
        return f"21 degrees {unit} and sunny in {city}"

    url, key = real
    client = openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
    try:
        agent = Agent(
            name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            model_settings=ModelSettings(tool_choice="required", max_tokens=120, temperature=0),
        )  # fmt: skip
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
        assert ran and all(isinstance(city, str) and city for city, _ in ran)
        assert isinstance(result.final_output, str) and result.final_output.strip()
    finally:
        await client.close()
