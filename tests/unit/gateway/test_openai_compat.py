"""POST /v1/chat/completions' pure core: requests, deterministic ids, the plan over the tree,
chunks and completions in OpenAI's shapes, finish reasons, restarts and errors."""

from __future__ import annotations

from schemas import sealing

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.errors import ApiError, NotFound, Unauthorized, openai_response
from gateway.openai_reply import Delivery, Piece, completion, generation_error, piece_of, pieces, shape_for, stream_chunks
from gateway.openai_request import (
    ChatMessage,
    conversation_id_for,
    message_keys,
    parse_request,
    plan_turn,
    reply_key,
    resolve_model,
)
from gateway.quotas import Exceeded, QuotaExceeded
from parley import ids
from schemas.events import ConversationCreated, MessagePosted
from streams import projection, tree
from streams.context_tokens import TokenCounter
from streams.prompt import Layout, build_prompt
from streams.router import policy_from
from streams.settings import RouterSettings

MAX = 1000
U, A, S = "user", "assistant", "system"


def msgs(*pairs: tuple[str, str]) -> tuple[ChatMessage, ...]:
    return tuple(ChatMessage(role, content) for role, content in pairs)


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "Hi"}], **extra}


# ------------------------------------------------------------------ the request


def test_a_request_is_read_as_openai_clients_send_it() -> None:
    chat = parse_request(
        {
            "model": "small",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "Again", "name": "ignored"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 7,
            "user": "end-user-1",
            "temperature": 0.2,  # accepted, ignored
            "n": 1,
            "tools": [],
        },
        MAX,
    )
    assert chat.messages == msgs((S, "Be brief."), (U, "Hello"), (A, "Hi."), (U, "Again"))
    assert (chat.model, chat.stream, chat.include_usage, chat.max_tokens, chat.end_user) == ("small", True, True, 7, "end-user-1")
    assert parse_request(body(max_completion_tokens=9, stream=None), MAX).max_tokens == 9
    assert parse_request(body(max_tokens=5, max_completion_tokens=50), MAX).max_tokens == 50  # the newer field wins
    assert parse_request(body(), MAX).stream is False


def test_empty_and_null_contents_are_taken_where_openai_takes_them() -> None:
    chat = parse_request(
        body(messages=[
            {"role": "system", "content": ""},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": None},
            {"role": "assistant"},
            {"role": "user", "content": [{"type": "text", "text": ""}]},
        ]),
        MAX,
    )
    assert chat.messages == msgs((S, ""), (U, ""), (A, ""), (A, ""), (U, ""))
    assert parse_request(body(store=True), MAX).messages == msgs((U, "Hi"))  # what Parley does anyway
    with pytest.raises(ApiError) as raised:
        parse_request(body(store=False), MAX)  # not honoured, so refused by name rather than ignored
    assert raised.value.param == "store" and "DELETE /v1/conversations" in str(raised.value)
    assert parse_request(body(), MAX).max_tokens is None  # no cap of Parley's: the pool's context decides


@pytest.mark.parametrize(
    ("change", "param", "status"),
    [
        ({"model": None}, "model", 400),
        ({"model": 3}, "model", 400),
        ({"messages": []}, "messages", 400),
        ({"messages": "Hi"}, "messages", 400),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", 400),
        ({"messages": [{"role": {}, "content": "x"}]}, "messages[0].role", 400),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}, "messages", 400),
        ({"messages": [{"role": "system", "content": None}, {"role": "user", "content": "x"}]}, "messages[0].content", 400),
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content", 400),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", 400),
        ({"store": False}, "store", 400),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]", 400),
        ({"messages": [{"role": "user", "content": "a\x00b"}]}, "messages[0].content", 400),
        ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content", 400),
        ({"messages": [{"role": "user", "content": "x" * (MAX + 1)}]}, "messages[0].content", 413),
        ({"stream": "yes"}, "stream", 400),
        ({"max_tokens": 0}, "max_tokens", 400),
        ({"max_tokens": True}, "max_tokens", 400),
        ({"max_tokens": 10**12}, "max_tokens", 400),
        ({"n": 2}, "n", 400),
        ({"tools": [{"type": "function"}]}, "tools", 400),
        ({"logprobs": True}, "logprobs", 400),
        ({"stream_options": {"include_usage": "yes"}}, "include_usage", 400),
        ({"user": 5}, "user", 400),
    ],
)
def test_bad_requests_are_refused_naming_the_parameter(change: dict[str, Any], param: str, status: int) -> None:
    with pytest.raises(ApiError) as raised:
        parse_request(body(**change), MAX)
    assert (raised.value.status, raised.value.param) == (status, param)


def test_models_are_the_pools_or_their_models_and_auto_lets_the_router_choose() -> None:
    policy = policy_from(RouterSettings())
    assert resolve_model("auto", policy) is None and resolve_model("", policy) is None
    assert resolve_model("small", policy) == "small"
    model = policy.pools["medium"].model
    assert resolve_model(model, policy) == model
    with pytest.raises(NotFound) as raised:
        resolve_model("gpt-4o", policy)
    assert (raised.value.code, raised.value.param) == ("model_not_found", "model")


# ------------------------------------------------------------------ ids and the plan


def test_keys_depend_on_the_whole_history_so_far_and_on_nothing_else() -> None:
    turn1 = msgs((S, "sys"), (U, "q1"))
    turn2 = turn1 + msgs((A, "a1"), (U, "q2"))
    assert message_keys("u1", turn2)[:2] == message_keys("u1", turn1) == message_keys("u1", turn1)
    assert len(set(message_keys("u1", turn2))) == 4
    assert message_keys("u1", msgs((U, "q1"))) != message_keys("u1", msgs((A, "q1")))  # the role counts


def test_one_conversation_per_user_end_user_and_opening() -> None:
    turn1 = msgs((S, "sys"), (U, "q1"))
    turn2 = turn1 + msgs((A, "a1"), (U, "q2"))
    cid = conversation_id_for("u1", "", turn1, message_keys("u1", turn1))
    assert cid == conversation_id_for("u1", "", turn2, message_keys("u1", turn2))
    others = {
        conversation_id_for("u2", "", turn1, message_keys("u1", turn1)),
        conversation_id_for("u1", "alice", turn1, message_keys("u1", turn1)),
        conversation_id_for("u1", "", msgs((S, "sys"), (U, "other")), message_keys("u1", msgs((S, "sys"), (U, "other")))),
    }
    assert cid not in others and len(others) == 3


@dataclass(frozen=True)
class Node:
    id: str
    parent_id: str | None
    role: str
    content: str
    status: str | None = "complete"


CID = "7d0f8a5e-2a43-4b8e-9c8e-0d1f3b1f6a10"


def plan_of(history: tuple[ChatMessage, ...], stored: list[Node], idempotency: str | None = "call-1"):  # type: ignore[no-untyped-def]
    """The plan of one call with this ``Idempotency-Key`` (None: a call without one)."""
    keys = message_keys("u1", history)
    return plan_turn(CID, history, keys, stored, reply_key(keys[-1], idempotency))


def stored_after(history: tuple[ChatMessage, ...], reply_text: str, status: str = "complete") -> list[Node]:
    """What the tree holds after the turn that answered ``history`` (posted whole) with ``reply_text``."""
    plan = plan_of(history, [])
    nodes = [Node(p.message_id, p.parent_id, p.role, p.content) for p in plan.posts]
    return nodes + [Node(plan.reply_id, plan.question_id, A, reply_text, status)]


def test_a_new_history_is_posted_whole_as_one_branch_and_its_last_message_answered() -> None:
    history = msgs((S, "sys"), (U, "q1"), (A, "earlier answer"), (U, "q2"))
    keys = message_keys("u1", history)
    plan = plan_of(history, [])
    assert [p.role for p in plan.posts] == [S, U, A, U]
    assert [p.parent_id for p in plan.posts] == [None, *(p.message_id for p in plan.posts[:-1])]
    assert [p.message_id for p in plan.posts] == [ids.user_message_id(CID, k) for k in keys]
    assert plan.question_id == plan.posts[-1].message_id and plan.question_key == keys[-1]
    assert plan.reply_id == ids.reply_id(CID, reply_key(keys[-1], "call-1")) and not plan.replayed and plan.pending is None
    assert plan_of(history, []) == plan  # deterministic


def test_the_growing_history_continues_the_branch_through_the_stored_reply() -> None:
    turn1 = msgs((S, "sys"), (U, "q1"))
    stored = stored_after(turn1, "a1")
    turn2 = turn1 + msgs((A, "a1"), (U, "q2"))
    plan = plan_of(turn2, stored)
    assert [p.content for p in plan.posts] == ["q2"]  # only the new question is appended
    assert plan.posts[0].parent_id == stored[-1].id  # under the reply Parley made


def test_an_assistant_message_that_is_not_the_stored_reply_is_posted_as_a_sibling_branch() -> None:
    turn1 = msgs((U, "q1"))
    stored = stored_after(turn1, "a1")
    turn2 = turn1 + msgs((A, "an edited a1"), (U, "q2"))
    plan = plan_of(turn2, stored)
    assert [(p.role, p.content) for p in plan.posts] == [(A, "an edited a1"), (U, "q2")]
    assert plan.posts[0].parent_id == stored[0].id and plan.pending is None


def test_a_withdrawn_reply_sent_back_as_null_continues_the_branch_through_it() -> None:
    """A reply moderation cut is answered ``content: null``; a client that appends it as it got it stays on the
    branch (the SDK's chat loop), instead of being refused or forking."""
    turn1 = msgs((U, "q1"))
    stored = stored_after(turn1, "This reply was withdrawn.", status="filtered")
    turn2 = parse_request(
        body(messages=[{"role": "user", "content": "q1"}, {"role": "assistant", "content": None}, {"role": "user", "content": "q2"}]),
        MAX,
    ).messages
    plan = plan_of(turn2, stored)
    assert [p.content for p in plan.posts] == ["q2"] and plan.posts[0].parent_id == stored[-1].id


def test_a_reply_still_being_stored_is_named_pending() -> None:
    turn1 = msgs((U, "q1"))
    stored = stored_after(turn1, "a", status="streaming")
    turn2 = turn1 + msgs((A, "a1"), (U, "q2"))
    assert plan_of(turn2, stored).pending == stored[-1].id


def test_a_retried_request_replays_its_reply_and_appends_nothing() -> None:
    history = msgs((U, "q1"))
    stored = stored_after(history, "a1", status="streaming")
    plan = plan_of(history, stored)
    assert plan.replayed and plan.posts == () and plan.reply_id == stored[-1].id


def test_without_an_idempotency_key_the_same_question_gets_a_new_sibling_reply() -> None:
    history = msgs((U, "q1"))
    stored = stored_after(history, "a1")
    again = plan_of(history, stored, idempotency=None)
    assert not again.replayed and again.posts == ()  # the question is the stored one
    assert again.reply_id != stored[-1].id and again.question_id == stored[-1].parent_id
    assert plan_of(history, stored, idempotency=None).reply_id != again.reply_id  # every call a new sample


def test_a_question_appended_without_its_reply_is_reused() -> None:
    history = msgs((U, "q1"))
    first = plan_of(history, [])
    stored = [Node(p.message_id, p.parent_id, p.role, p.content) for p in first.posts]
    again = plan_of(history, stored)
    assert again.posts == () and not again.replayed and again.reply_id == first.reply_id


# ------------------------------------------------------------------ the reply


def test_a_resumed_attempt_sends_only_what_is_past_the_text_already_sent() -> None:
    d = Delivery()
    assert d.feed("Hello ") + d.feed("wor") == "Hello wor"
    d.restart(6)  # the new attempt keeps "Hello " and writes on
    assert d.feed("wo") == "" and d.feed("rld!") == "ld!" and d.sent == 12
    d.restart(12)
    assert d.feed(" Bye") == " Bye"


@pytest.mark.parametrize(("parley", "openai"), [("stop", "stop"), ("length", "length"), ("cancelled", "stop"), (None, "stop")])
def test_finish_reasons(parley: str | None, openai: str) -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "cached_tokens": 8}
    p = piece_of("done", {"finish_reason": parley, "usage": usage}, Delivery())
    assert p == Piece(
        finish_reason=openai,
        usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 8}},
    )


async def _events(*items: tuple[str, dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for kind, data in items:
        yield {"event": kind, "data": json.dumps(data)}


async def _all(it: AsyncIterator[Any]) -> list[Any]:
    return [x async for x in it]


async def test_pieces_follow_restarts_and_stop_at_the_end() -> None:
    events = _events(
        ("message", {"reply_id": "r"}),
        ("delta", {"text": "abc"}),
        ("restarted", {"offset_chars": 1}),
        ("delta", {"text": "bcd"}),
        ("done", {"finish_reason": "length", "usage": {}}),
        ("delta", {"text": "never"}),
    )
    got = await _all(pieces(events))
    assert [p.text for p in got] == ["abc", "d", ""] and got[-1].finish_reason == "length"


def _shape() -> Any:
    return shape_for("r1", "small", 1_700_000_000.5)


async def _streamed(first: Piece, *rest: Piece, include_usage: bool = False) -> list[str]:
    async def more() -> AsyncIterator[Piece]:
        for p in rest:
            yield p

    return await _all(stream_chunks(_shape(), first, more(), include_usage))


async def test_a_stream_is_chunks_in_openais_shape_then_done() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 4}}
    out = await _streamed(Piece(text="Hel"), Piece(text="lo"), Piece(finish_reason="stop", usage=usage), include_usage=True)
    assert out[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(d)) for d in out[:-1]]
    assert {c.id for c in chunks} == {"chatcmpl-r1"} and {c.model for c in chunks} == {"small"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, None, None, "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7
    assert chunks[-1].usage.prompt_tokens_details is not None and chunks[-1].usage.prompt_tokens_details.cached_tokens == 4
    assert all(c.usage is None for c in chunks[:-1])


async def test_a_stream_without_usage_has_no_usage_chunk() -> None:
    out = await _streamed(Piece(text="Hi"), Piece(finish_reason="length", usage={}))
    assert [json.loads(d)["choices"][0]["finish_reason"] for d in out[:-1]] == [None, None, "length"]
    assert all("usage" not in json.loads(d) for d in out[:-1])


async def test_a_failure_after_text_ends_the_stream_with_an_openai_error_and_no_done() -> None:
    out = await _streamed(Piece(text="Hi"), Piece(error={"code": "engine_error", "message": "the engine failed"}))
    last = json.loads(out[-1])
    assert "[DONE]" not in out
    assert last == {"error": {"message": "the engine failed", "type": "server_error", "param": None, "code": "engine_error"}}


def test_a_completion_is_in_openais_shape() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}
    parsed = ChatCompletion.model_validate(completion(_shape(), "Hello", "stop", usage))
    assert parsed.object == "chat.completion" and parsed.created == 1_700_000_000
    assert parsed.choices[0].message.content == "Hello" and parsed.choices[0].message.role == "assistant"
    assert parsed.usage is not None and parsed.usage.total_tokens == 7


@pytest.mark.parametrize(
    ("error", "status", "code", "retry_after"),
    [
        ({"code": "overloaded", "message": "busy", "retry_after": 2.5}, 503, "overloaded", "2"),
        ({"code": "gateway_draining", "message": "bye", "retry_after": 5}, 503, "gateway_draining", "5"),
        ({"code": "context_too_long", "message": "long"}, 400, "context_length_exceeded", None),
        ({"code": "unknown_model", "message": "who"}, 404, "model_not_found", None),
        ({"code": "engine_error", "message": "boom"}, 500, "engine_error", None),
        ({}, 500, "failed", None),
    ],
)
def test_generation_errors_become_the_statuses_openai_clients_expect(
    error: dict[str, Any], status: int, code: str, retry_after: str | None
) -> None:
    response = openai_response(generation_error(error))
    assert response.status_code == status and response.headers.get("retry-after") == retry_after
    assert json.loads(bytes(response.body))["error"]["code"] == code


def test_errors_in_openai_shape_keep_parleys_status_headers_and_fields() -> None:
    reset = datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)
    quota = QuotaExceeded(Exceeded(quota="requests_per_minute", limit=20, used=20, reset_at=reset, retry_after=42))
    response = openai_response(quota)
    error = json.loads(bytes(response.body))["error"]
    assert response.status_code == 429 and response.headers["retry-after"] == "42"
    assert error["type"] == "rate_limit_error" and error["code"] == "quota_exceeded" and error["param"] is None
    assert error["limit"] == 20 and error["quota"] == "requests_per_minute" and error["message"]

    denied = openai_response(Unauthorized("send your key", code="missing_api_key"))
    assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
    assert json.loads(bytes(denied.body))["error"]["type"] == "authentication_error"


# ------------------------------------------------------------------ the pipeline takes the history as it is


def test_a_posted_history_is_folded_projected_and_prompted_with_its_roles() -> None:
    """An assistant MessagePosted is a tree node like a reply: the prompt shows it as the assistant's."""
    history = msgs((S, "Be brief."), (U, "q1"), (A, "a1 from elsewhere"), (U, "q2"))
    plan = plan_of(history, [])
    common = {"conversation_id": CID, "user_id": "u1"}
    posted = [
        MessagePosted(**common, message_id=p.message_id, parent_id=p.parent_id, client_message_id=p.key,
                      role=p.role, content=p.content)
        for p in plan.posts
    ]
    state = tree.fold([ConversationCreated(**common), *posted])
    assert state.selected_leaf_id == plan.question_id
    assert [(m.role, m.content) for m in tree.branch(state, plan.question_id)] == [(m.role, m.content) for m in history]
    writes = projection.writes_for(tree.fold([ConversationCreated(**common), *posted[:2]]), posted[2], sealing.sealer())
    assert dict(writes[0].cells)["role"] == A
    layout = Layout(system_prompt="", budget_tokens=10_000, block_tokens=100)
    prompt = build_prompt(tree.branch(state, plan.question_id), layout, TokenCounter.from_spec("bytes"))
    assert [(m.role, m.content) for m in prompt.messages] == [(m.role, m.content) for m in history]
