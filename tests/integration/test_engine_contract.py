"""One contract, every engine a worker can face (workers/engine_api.py).

The same checks run against the scripted engine the unit tests drive the
worker with (workers/scripted.py), Parley's CPU engine over HTTP (real
processes: SmolLM2, the random test model and the synthetic backend), and SGLang's own wire shapes
(tests/fixtures/sglang, served to the same HTTP client a worker uses). If the
stand-in and the real engines ever disagree on what a stream, a cap, an abort
or a refusal looks like, a test here names which.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tests.integration.test_engine import start_engine
from schemas.events import PromptMessage
from workers.chat_template import CHATML
from workers.engine_api import EngineClient, EngineDelta, EngineRejected, GenerateRequest
from workers.scripted import ScriptedEngine
from workers.sglang import SGLangClient

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
#: Every subject is asked for this many tokens where a cap is checked (the recorded length stream's cap).
CAP = 8

#: One event loop for the module: the HTTP clients the fixture opens are closed on the loop that used them.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Subject:
    """An engine, and how to ask it for each behaviour the contract covers."""

    name: str
    client: EngineClient
    prompts: dict[str, str]  # behaviour → prompt text that brings it about
    #: SGLang recordings only: the fixture the transport answers /generate with, by behaviour.
    recorded: dict[str, str] = field(default_factory=dict)
    playing: list[str] = field(default_factory=lambda: [""])

    def request(self, behaviour: str, rid: str, max_new_tokens: int = CAP) -> GenerateRequest:
        self.playing[0] = self.recorded.get(behaviour, "")
        return GenerateRequest(rid=rid, text=self.prompts[behaviour], max_new_tokens=max_new_tokens, temperature=0.0)


def _recorded_sglang() -> Subject:
    playing = [""]

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/generate":
            name = playing[0]
            status = 400 if name.endswith(".json") else 200
            return httpx.Response(status, content=(FIXTURES / name).read_bytes(), headers={"content-type": "text/event-stream"})
        if path == "/v1/loads":
            return httpx.Response(200, content=(FIXTURES / "v1_loads.json").read_bytes())
        if path == "/get_model_info":
            return httpx.Response(200, json={"model_path": "Qwen/Qwen2.5-0.5B-Instruct", "is_generation": True})
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "qwen", "max_model_len": 32768}]})
        if path in ("/health", "/abort_request"):
            return httpx.Response(200)
        return httpx.Response(404, json={"detail": "Not Found"})

    client = SGLangClient("http://sglang", transport=httpx.MockTransport(answer))
    recorded = {"long": "stream_length.sse", "abort": "stream_abort.sse", "refuse": "error_400.json"}
    return Subject("sglang-recorded", client, dict.fromkeys(recorded, "The capital of France is"), recorded, playing)


def _over_http(name: str, url: str, context_tokens: int) -> Subject:
    def asked(text: str) -> str:  # what a worker sends: the chat template rendered, ending where the reply begins
        return CHATML.render_prompt([PromptMessage(role="user", content=text)])

    prompts = {
        "long": asked("Tell me a very long story about a lighthouse."),
        "abort": asked("Count slowly from one to a hundred."),
        "refuse": asked("word " * (context_tokens + 10)),
    }
    return Subject(name, SGLangClient(url), prompts)


@pytest.fixture(scope="module")
def smollm2_url() -> Iterator[str]:
    yield from start_engine("--backend", "torch", "--max-batch", "4", "--context-length", "256", "--max-total-tokens", "4096")


@pytest.fixture(scope="module")
def random_url() -> Iterator[str]:
    yield from start_engine("--backend", "random", "--max-batch", "4", "--context-length", "256", "--max-total-tokens", "4096")


@pytest.fixture(scope="module")
def synthetic_url() -> Iterator[str]:
    yield from start_engine(
        "--backend", "synthetic", "--context-length", "256", "--synthetic-ttft-ms", "20", "--synthetic-tokens-per-s", "100"
    )


@pytest_asyncio.fixture(params=["scripted", "cpu-smollm2", "cpu-random", "cpu-synthetic", "sglang-recorded"], loop_scope="module")
async def subject(request: pytest.FixtureRequest) -> AsyncIterator[Subject]:
    name = request.param
    if name == "scripted":
        prompts = {"long": "[[tokens:200]]", "abort": "[[tokens:200]][[step_ms:5]]", "refuse": "[[fail:rejected]]"}
        s = Subject(name, ScriptedEngine(), prompts)
    elif name == "sglang-recorded":
        s = _recorded_sglang()
    else:
        url = request.getfixturevalue(f"{name.removeprefix('cpu-')}_url")
        s = _over_http(name, url, 256)
    yield s
    close = getattr(s.client, "close", None)
    if close is not None:
        await close()


async def stream(s: Subject, req: GenerateRequest, abort_after: int | None = None) -> list[EngineDelta]:
    deltas = []
    async for d in s.client.generate(req):
        deltas.append(d)
        if abort_after is not None and len(deltas) == abort_after:
            await s.client.abort(req.rid)
    return deltas


def well_formed(deltas: list[EngineDelta]) -> None:
    """One final delta, last; counts that only grow; prompt and cache counts that agree."""
    assert deltas and deltas[-1].finish_reason is not None
    assert all(d.finish_reason is None for d in deltas[:-1])
    counts = [d.completion_tokens for d in deltas]
    assert counts == sorted(counts)
    last = deltas[-1]
    assert last.prompt_tokens > 0 and 0 <= last.cached_tokens <= last.prompt_tokens


async def test_a_capped_reply_streams_deltas_and_ends_at_the_cap(subject: Subject) -> None:
    deltas = await stream(subject, subject.request("long", f"{subject.name}-long"))
    well_formed(deltas)
    last = deltas[-1]
    assert last.finish_reason in ("length", "stop")
    assert last.completion_tokens == CAP or (last.finish_reason == "stop" and last.completion_tokens < CAP)
    assert "".join(d.text for d in deltas)  # text arrives as deltas, not only at the end


async def test_an_abort_mid_stream_ends_cancelled_with_what_was_streamed(subject: Subject) -> None:
    req = subject.request("abort", f"{subject.name}-abort", max_new_tokens=200)
    deltas = await stream(subject, req, abort_after=1)
    well_formed(deltas)
    assert deltas[-1].finish_reason == "cancelled"
    assert deltas[-1].completion_tokens < 200


async def test_a_request_the_engine_cannot_take_is_refused_before_any_delta(subject: Subject) -> None:
    seen: list[EngineDelta] = []
    with pytest.raises(EngineRejected):
        async for d in subject.client.generate(subject.request("refuse", f"{subject.name}-refuse")):
            seen.append(d)
    assert seen == []


async def test_model_load_and_health_answer_in_the_contracts_shape(subject: Subject) -> None:
    info = await subject.client.model_info()
    assert info.model and info.context_length > 0
    load = await subject.client.load()
    assert load.running >= 0 and load.queued >= 0 and load.max_running >= 1
    assert 0.0 <= load.kv_usage <= 1.0 and 0.0 <= load.cache_hit_rate <= 1.0
    assert await subject.client.health() is True
    json.dumps(info.__dict__)  # plain values: what a heartbeat and a log line carry
