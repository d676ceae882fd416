"""SGLangClient's wire reading, over SGLang's recorded response shapes (tests/fixtures/sglang)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from workers.engine import protocol
from workers.engine_api import EngineRejected, EngineUnavailable, GenerateRequest
from workers.sglang import (
    DONE,
    SGLangClient,
    StreamDecoder,
    decode_stream,
    error_message,
    generate_payload,
    map_finish_reason,
    parse_get_load,
    parse_loads,
    parse_sse_line,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def lines(name: str) -> list[bytes]:
    return (FIXTURES / name).read_bytes().splitlines()


def final_text(name: str) -> str:
    """The cumulative text of the last output object in a recorded stream."""
    last = [parse_sse_line(line) for line in lines(name)]
    outputs = [e for e in last if isinstance(e, dict) and "text" in e]
    return str(outputs[-1]["text"])


def test_sse_lines() -> None:
    assert parse_sse_line(b"") is None
    assert parse_sse_line(b": ping") is None
    assert parse_sse_line(b"data: [DONE]") == DONE
    assert parse_sse_line(b'data: {"text": "a"}') == {"text": "a"}
    with pytest.raises(ValueError):
        parse_sse_line(b"data: {not json")


def test_length_stream_deltas_concatenate_to_the_final_text() -> None:
    deltas = decode_stream(lines("stream_length.sse"))
    assert "".join(d.text for d in deltas) == final_text("stream_length.sse") == " Paris. It is the largest city in"
    assert [d.text for d in deltas[:3]] == [" Paris", ".", " It"]
    assert [d.completion_tokens for d in deltas] == list(range(1, 9))
    assert all(d.finish_reason is None for d in deltas[:-1])
    last = deltas[-1]
    assert (last.finish_reason, last.prompt_tokens, last.cached_tokens, last.completion_tokens) == ("length", 5, 2, 8)


def test_stop_string_is_trimmed_and_maps_to_stop() -> None:
    deltas = decode_stream(lines("stream_stop_str.sse"))
    assert "".join(d.text for d in deltas) == " Hello! How can I help?"
    assert deltas[-1].finish_reason == "stop" and deltas[-1].text == ""
    assert deltas[-1].completion_tokens == 8


def test_eos_token_stop_counts_the_token_but_adds_no_text() -> None:
    deltas = decode_stream(lines("stream_stop_eos.sse"))
    assert "".join(d.text for d in deltas) == " Yes."
    assert (deltas[-1].finish_reason, deltas[-1].completion_tokens) == ("stop", 3)


def test_abort_while_running_is_cancelled_with_the_text_so_far() -> None:
    deltas = decode_stream(lines("stream_abort.sse"))
    assert "".join(d.text for d in deltas) == " Paris. It"
    assert deltas[-1].finish_reason == "cancelled" and deltas[-1].error is None
    assert deltas[-1].completion_tokens == 3


def test_abort_while_queued_is_cancelled_without_text() -> None:
    deltas = decode_stream(lines("stream_abort_before_prefill.sse"))
    assert len(deltas) == 1
    assert (deltas[0].finish_reason, deltas[0].text, deltas[0].completion_tokens) == ("cancelled", "", 0)


def test_error_event_before_any_token_is_a_rejection_with_sglangs_message() -> None:
    with pytest.raises(EngineRejected, match=r"longer than the model's context length \(32768 tokens\)"):
        decode_stream(lines("stream_error.sse"))


def test_scheduler_abort_with_400_before_any_token_is_a_rejection() -> None:
    with pytest.raises(EngineRejected, match="exceeds the maximum allowed length"):
        decode_stream(lines("stream_abort_400.sse"))


def test_error_after_tokens_ends_the_stream_failed() -> None:
    deltas = decode_stream(lines("stream_error_midway.sse"))
    assert "".join(d.text for d in deltas) == " Paris."
    assert deltas[-1].finish_reason == "failed"
    assert deltas[-1].error == "CUDA out of memory while decoding"


def test_stream_cut_after_tokens_fails_and_before_tokens_is_unavailable() -> None:
    deltas = decode_stream(lines("stream_truncated.sse"))
    assert deltas[-1].finish_reason == "failed" and "without a finish_reason" in (deltas[-1].error or "")
    with pytest.raises(EngineUnavailable):
        decode_stream([b"data: [DONE]"])


def test_an_incremental_stream_gives_the_same_deltas_as_the_cumulative_one() -> None:
    cumulative = decode_stream(lines("stream_length.sse"))
    incremental = decode_stream(lines("stream_length_incremental.sse"), incremental=True)
    assert incremental == cumulative
    assert "".join(d.text for d in incremental) == " Paris. It is the largest city in"


def test_abort_while_queued_reads_alike_in_both_forms() -> None:
    [queued] = decode_stream(lines("stream_abort_before_prefill.sse"), incremental=True)
    assert (queued.text, queued.finish_reason) == ("", "cancelled")


def test_non_cumulative_text_is_reported_not_duplicated() -> None:
    decoder = StreamDecoder()
    first = decoder.feed(b'data: {"text": "ab", "meta_info": {"completion_tokens": 1, "finish_reason": null}}')
    assert first is not None and first.text == "ab"
    broken = decoder.feed(b'data: {"text": "c", "meta_info": {"completion_tokens": 2, "finish_reason": null}}')
    assert broken is not None and broken.finish_reason == "failed" and "incremental" in (broken.error or "")
    assert decoder.feed(b"data: [DONE]") is None


def test_finish_reason_mapping() -> None:
    assert map_finish_reason(None) == (None, None)
    assert map_finish_reason({"type": "stop", "matched": 2}) == ("stop", None)
    assert map_finish_reason({"type": "length", "length": 4}) == ("length", None)
    assert map_finish_reason({"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}) == ("cancelled", None)
    assert map_finish_reason({"type": "abort", "message": "boom", "status_code": 500}) == ("failed", "boom")
    assert map_finish_reason({"type": "weird"})[0] == "failed"


def test_error_bodies() -> None:
    assert error_message((FIXTURES / "error_400.json").read_bytes()).startswith("The input (40001 tokens)")
    assert error_message(b'{"object": "error", "message": "bad", "type": "Bad Request", "code": 400}') == "bad"
    assert error_message(b"plain text") == "plain text"


def test_load_shapes() -> None:
    load = parse_loads(json.loads((FIXTURES / "v1_loads.json").read_text()))
    assert (load.running, load.queued, load.max_running) == (8, 2, 96)
    assert load.kv_usage == pytest.approx(0.1) and load.cache_hit_rate == pytest.approx(0.4)
    old = parse_get_load(json.loads((FIXTURES / "get_load.json").read_text()))
    assert (old.running, old.queued) == (4, 1)
    assert parse_get_load({"load": 3}).running == 3


def test_payload_is_sglangs_generate_body() -> None:
    req = GenerateRequest(rid="r-1", text="hi", max_new_tokens=9, temperature=0.5, top_p=0.9, stop=("\n",))
    assert generate_payload(req) == {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 9, "temperature": 0.5, "top_p": 0.9, "stop": ["\n"]},
        "stream": True,
        "rid": "r-1",
    }
    assert "stop" not in generate_payload(GenerateRequest(rid="r", text="", max_new_tokens=1))["sampling_params"]


def test_the_sampling_extensions_are_sent_by_sglangs_names_only_when_set() -> None:
    req = GenerateRequest(
        rid="r", text="", max_new_tokens=9, top_k=40, min_p=0.05, repetition_penalty=1.1, ignore_eos=True,
        stop_token_ids=(2, 7), min_new_tokens=3,
    )
    sent = generate_payload(req)["sampling_params"]
    assert {k: sent[k] for k in ("top_k", "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids", "min_new_tokens")} == {
        "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True, "stop_token_ids": [2, 7], "min_new_tokens": 3,
    }
    plain = generate_payload(GenerateRequest(rid="r", text="", max_new_tokens=1))["sampling_params"]
    assert set(plain) == {"max_new_tokens", "temperature", "top_p"}
    assert set(sent) <= protocol.SGLANG_SAMPLING_KEYS  # every name is one SGLang's SamplingParams takes


# ------------------------------------------------------------ the client over a mock transport


def client_for(handler) -> SGLangClient:  # type: ignore[no-untyped-def]
    return SGLangClient("http://engine", transport=httpx.MockTransport(handler))


REQ = GenerateRequest(rid="r-1", text="The capital of France is", max_new_tokens=8)


async def collect(client: SGLangClient) -> list:  # type: ignore[type-arg]
    return [d async for d in client.generate(REQ)]


def sse(name: str) -> httpx.Response:
    return httpx.Response(200, content=(FIXTURES / name).read_bytes(), headers={"content-type": "text/event-stream"})


def server_info(**flags: object) -> httpx.Response:
    return httpx.Response(200, json={"model_path": "m", **flags})


async def test_client_streams_a_recorded_response() -> None:
    seen: dict = {}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_server_info":
            return server_info()  # SGLang's default: cumulative
        seen.update(path=request.url.path, body=json.loads(request.content))
        return sse("stream_length.sse")

    client = client_for(handler)
    deltas = await collect(client)
    await client.close()
    assert seen["path"] == "/generate" and seen["body"]["rid"] == "r-1" and seen["body"]["stream"] is True
    assert "".join(d.text for d in deltas) == " Paris. It is the largest city in"
    assert deltas[-1].finish_reason == "length"


async def test_client_reads_the_stream_form_from_server_info_once_per_engine_life() -> None:
    probes: list[str] = []
    engine = {"incremental": True, "up": True}

    def handler(request: httpx.Request) -> httpx.Response:
        if not engine["up"]:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/get_server_info":
            probes.append("probe")
            return server_info(incremental_streaming_output=engine["incremental"])
        return sse("stream_length_incremental.sse" if engine["incremental"] else "stream_length.sse")

    client = client_for(handler)
    whole = " Paris. It is the largest city in"
    assert "".join(d.text for d in await collect(client)) == whole
    assert "".join(d.text for d in await collect(client)) == whole
    assert probes == ["probe"]  # once, not per request
    # The engine goes away and comes back launched without the flag: the client reads the form again.
    engine["up"] = False
    with pytest.raises(EngineUnavailable):
        await collect(client)
    engine.update(up=True, incremental=False)
    assert "".join(d.text for d in await collect(client)) == whole
    assert probes == ["probe", "probe"]
    await client.close()


async def test_a_stream_in_the_other_form_fails_and_the_form_is_read_again() -> None:
    said = {"incremental": False}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_server_info":
            return server_info(incremental_streaming_output=said["incremental"])
        return sse("stream_length_incremental.sse")  # restarted with the flag, unseen by the client

    client = client_for(handler)
    broken = await collect(client)
    assert broken[-1].finish_reason == "failed" and "not cumulative" in (broken[-1].error or "")
    said["incremental"] = True
    assert "".join(d.text for d in await collect(client)) == " Paris. It is the largest city in"
    await client.close()


async def test_client_refuses_an_engine_whose_stream_form_is_unreadable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_server_info":
            return server_info(incremental_streaming_output="yes")
        return sse("stream_length.sse")

    with pytest.raises(EngineUnavailable, match="incremental_streaming_output"):
        await collect(client_for(handler))


async def test_client_takes_an_engine_without_server_info_as_cumulative() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_server_info":
            return httpx.Response(404)
        return sse("stream_length.sse")

    assert "".join(d.text for d in await collect(client_for(handler))) == " Paris. It is the largest city in"


async def test_client_maps_http_errors() -> None:
    body = (FIXTURES / "error_400.json").read_bytes()

    def answering(status: int, content: bytes):  # type: ignore[no-untyped-def]
        return lambda r: server_info() if r.url.path == "/get_server_info" else httpx.Response(status, content=content)

    with pytest.raises(EngineRejected, match="longer than the model's context length"):
        await collect(client_for(answering(400, body)))
    with pytest.raises(EngineUnavailable, match="HTTP 503"):
        await collect(client_for(answering(503, b"")))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(EngineUnavailable, match="unreachable"):
        await collect(client_for(refuse))
    assert await client_for(refuse).health() is False
    with pytest.raises(EngineUnavailable):
        await client_for(refuse).abort("r-1")


async def test_client_load_falls_back_to_get_load() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/loads":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(200, content=(FIXTURES / "get_load.json").read_bytes())

    load = await client_for(handler).load()
    assert (load.running, load.queued) == (4, 1)


async def test_client_model_info_reads_context_from_v1_models_like_sglang() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/get_model_info":
            return httpx.Response(200, json={"model_path": "qwen/qwen2.5-0.5b-instruct", "is_generation": True})
        return httpx.Response(200, json={"object": "list", "data": [{"id": "qwen", "max_model_len": 32768}]})

    info = await client_for(handler).model_info()
    assert (info.model, info.context_length, info.untrained) == ("qwen/qwen2.5-0.5b-instruct", 32768, False)
