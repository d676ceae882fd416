"""Bad input at the HTTP boundary, on the real e2e stack: each mistake gets its own 4xx as JSON
``{"error": {"code", "message"}}`` (DESIGN.md §7), another user's ids are indistinguishable from
unknown ones (404, never 403), and nothing reaches Kafka for a refused request.

Users and conversations are this module's own; the stack is the shared e2e one (its own topics
and keyspace, tests/e2e/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from parley.consumer import read_until, watermarks
from parley.partitioning import partition_for
from schemas import codec
from schemas.catalog import TOPICS
from tools.client import ParleyClient

MAX_MESSAGE_CHARS = 32_000  # PARLEY_GATEWAY_MAX_MESSAGE_CHARS's default: the e2e stack keeps it
MAX_BODY_BYTES = 256 * 1024  # PARLEY_GATEWAY_MAX_BODY's default


@dataclass(frozen=True)
class Turn:
    key: str
    conversation_id: str
    reply_id: str
    user_message_id: str
    text: str = ""  # what the reply streamed
    done_cursor: str = ""  # the id of its `done` event: the offset of its last chunk


@dataclass(frozen=True)
class World:
    url: str
    kafka: object
    mine: Turn
    theirs: Turn
    metrics_url: str  # the gateway's, on its own port

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key or self.mine.key}"} if key != "" else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


async def _turn(url: str, key: str) -> Turn:
    client = ParleyClient(url, key)
    try:
        cid = await client.create_conversation("bad input")
        reply = await client.send(cid, "Something to refer to")
        assert reply.final is not None and reply.final.event == "done", reply.events
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # stored, so the message routes find the reply
            conv = await client.conversation(cid)
            if any(m["id"] == reply.head["reply_id"] and m["status"] not in (None, "streaming") for m in conv["messages"]):
                break
            await asyncio.sleep(0.2)
        return Turn(key, cid, reply.head["reply_id"], reply.head["user_message_id"], reply.text, reply.final.id or "")
    finally:
        await client.close()


@pytest.fixture(scope="module")
def world(stack) -> World:
    mine = asyncio.run(_turn(stack.url, stack.new_key("plus")))
    theirs = asyncio.run(_turn(stack.url, stack.new_key("plus")))
    return World(stack.url, stack.kafka, mine, theirs, stack.inner.metrics_url())


def _events_of(kafka, topic: str, conversation_id: str) -> int:
    """How many records of ``conversation_id`` its partition of ``topic`` holds, read to the end."""
    name = kafka.topic(topic)
    partition = partition_for(conversation_id, TOPICS[topic].partitions)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"bad-input-{uuid.uuid4().hex[:6]}"})
    try:
        low, high = watermarks(consumer, TopicPartition(name, partition), 10)
        consumer.assign([TopicPartition(name, partition, 0)])
        count = 0
        for msg in read_until(consumer, {(name, partition): high} if high > low else {}, 60):
            event = codec.decode(msg.value())
            count += getattr(event, "conversation_id", None) == conversation_id
        return count
    finally:
        consumer.close()


@contextmanager
def nothing_appended(world: World, *conversation_ids: str) -> Iterator[None]:
    """The block appends no event of these conversations to chat.events or chat.control."""
    topics = ("chat.events", "chat.control")
    before = {(t, c): _events_of(world.kafka, t, c) for t in topics for c in conversation_ids}
    yield
    after = {(t, c): _events_of(world.kafka, t, c) for t in topics for c in conversation_ids}
    assert after == before, "a refused request appended events"


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"]["code"], str) and isinstance(body["error"]["message"], str)
    if code is not None:
        assert body["error"]["code"] == code, body


def _post_body() -> dict:
    return {"content": "hello", "client_message_id": uuid.uuid4().hex}


def id_routes(conversation_id: str, message_id: str, leaf_id: str) -> list[tuple[str, str, dict | None]]:
    """Every route that takes an id, with a body that would be accepted for a real one."""
    return [
        ("GET", f"/v1/conversations/{conversation_id}", None),
        ("POST", f"/v1/conversations/{conversation_id}/messages", _post_body()),
        ("PUT", f"/v1/conversations/{conversation_id}/leaf", {"leaf_id": leaf_id}),
        ("POST", f"/v1/messages/{message_id}/stop", None),
        ("POST", f"/v1/messages/{message_id}/regenerate", {"client_message_id": uuid.uuid4().hex}),
        ("GET", f"/v1/messages/{message_id}/stream", None),
    ]


# ------------------------------------------------------------------ cursors


@pytest.mark.parametrize(
    "cursor",
    ["garbage", "3", ":", "1:2:3", "a:1", "1:b", "²:1", "1:²", "0:-2", "-1:0", "1:99999999999999999999999", "1: 1", "1 :1"],
)
def test_a_garbage_last_event_id_is_400(world: World, cursor: str) -> None:
    with world.http() as http:
        r = http.get(f"/v1/messages/{world.mine.reply_id}/stream", headers={"Last-Event-ID": cursor.encode("latin-1")})
        assert_error(r, 400, "bad_cursor")
        r = http.get(f"/v1/messages/{world.mine.reply_id}/stream", params={"last_event_id": cursor})
        assert_error(r, 400, "bad_cursor")


def test_a_cursor_of_another_partition_is_400(world: World) -> None:
    partition = partition_for(world.mine.conversation_id, TOPICS["chat.tokens"].partitions)
    other = (partition + 1) % TOPICS["chat.tokens"].partitions
    with world.http() as http:
        r = http.get(f"/v1/messages/{world.mine.reply_id}/stream", headers={"Last-Event-ID": f"{other}:0"})
    assert_error(r, 400, "bad_cursor")


def _sse(response: httpx.Response) -> list[tuple[str, str, dict]]:
    """(event, id, data) of an SSE body read to its end."""
    out, event, ident = [], "message", ""
    for line in response.text.splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("id:"):
            ident = line[3:].strip()
        elif line.startswith("data:"):
            out.append((event, ident, json.loads(line[5:])))
            event, ident = "message", ""
    return out


def _shared_reads(world: World) -> float:
    """Records the gateway's shared token reader has read (parley_gateway_token_records_read_total)."""
    text = httpx.get(world.metrics_url, timeout=10).text
    return sum(float(v) for v in re.findall(r"^parley_gateway_token_records_read_total\{[^}]*\} (\S+)$", text, re.M))


def test_cursors_out_of_the_replys_bounds_end_promptly_and_never_move_the_shared_reader(world: World) -> None:
    """Before the reply: from its start. Past its last chunk: its outcome alone. Past the log's end: 400. A
    finished reply is replayed on a reader of its own (gateway/replay.py), never by seeking the shared one."""
    partition = partition_for(world.mine.conversation_id, TOPICS["chat.tokens"].partitions)
    route = f"/v1/messages/{world.mine.reply_id}/stream"
    with world.http() as http:
        (head,) = [i for e, i, _ in _sse(http.get(route)) if e == "message"]  # just before the reply's first chunk
        before = _shared_reads(world)
        for old in (f"{partition}:-1", head):  # the start of the log, and of the reply: the reply from its start
            events = _sse(http.get(route, headers={"Last-Event-ID": old}))
            assert "".join(d["text"] for e, _, d in events if e == "delta") == world.mine.text
            assert [e for e, _, _ in events][-1] == "done" and events[-1][1] == world.mine.done_cursor
        events = _sse(http.get(route, headers={"Last-Event-ID": world.mine.done_cursor}))
        assert [e for e, _, _ in events] == ["done"] and events[0][2]["finish_reason"] in ("stop", "length")
        assert _shared_reads(world) == before, "a finished reply's replay moved the shared token reader"
        assert_error(http.get(route, headers={"Last-Event-ID": f"{partition}:999999999999"}), 400, "bad_cursor")


# ------------------------------------------------------------------ ids


@pytest.mark.parametrize("unknown", [pytest.param(str(uuid.uuid4()), id="a-fresh-uuid"), "not-an-id", "0", "%E2%98%83"])
def test_unknown_ids_are_404_on_every_route_that_takes_one(world: World, unknown: str) -> None:
    with world.http() as http, nothing_appended(world, world.mine.conversation_id):
        for method, path, body in id_routes(unknown, unknown, world.mine.reply_id):
            assert_error(http.request(method, path, json=body), 404, "not_found")
        # A real conversation, but a message id that is none of its messages: also nothing found.
        for method, path, body in id_routes(world.mine.conversation_id, unknown, world.mine.reply_id)[3:]:
            assert_error(http.request(method, path, json=body), 404, "not_found")


def test_another_users_ids_are_404_not_403_on_every_route(world: World) -> None:
    theirs = world.theirs
    with world.http() as http, nothing_appended(world, theirs.conversation_id, world.mine.conversation_id):
        for method, path, body in id_routes(theirs.conversation_id, theirs.reply_id, theirs.reply_id):
            assert_error(http.request(method, path, json=body), 404, "not_found")
        r = http.get(f"/v1/messages/{theirs.user_message_id}/stream")
        assert_error(r, 404, "not_found")
        # Their message as my leaf: it is not a message of my conversation.
        r = http.put(f"/v1/conversations/{world.mine.conversation_id}/leaf", json={"leaf_id": theirs.reply_id})
        assert_error(r, 422, "unknown_message")


# ------------------------------------------------------------------ bodies


def test_a_message_over_the_limit_is_413(world: World) -> None:
    path = f"/v1/conversations/{world.mine.conversation_id}/messages"
    with world.http() as http, nothing_appended(world, world.mine.conversation_id):
        r = http.post(path, json={"content": "x" * (MAX_MESSAGE_CHARS + 1), "client_message_id": "huge"})
        assert_error(r, 413, "payload_too_large")
        r = http.post(path, json={"content": "x" * (MAX_BODY_BYTES + 1), "client_message_id": "huger"})
        assert_error(r, 413, "payload_too_large")
        big = b'{"content": "' + b"x" * (MAX_BODY_BYTES + 1) + b'", "client_message_id": "chunked"}'
        r = http.post(path, content=iter([big[i : i + 65536] for i in range(0, len(big), 65536)]))  # no Content-Length
        assert_error(r, 413, "payload_too_large")


@pytest.mark.parametrize("content", ["", "   ", "\n\t"])
def test_an_empty_message_is_422(world: World, content: str) -> None:
    with world.http() as http, nothing_appended(world, world.mine.conversation_id):
        r = http.post(f"/v1/conversations/{world.mine.conversation_id}/messages", json={"content": content, "client_message_id": "e"})
        assert_error(r, 422, "invalid")


#: Bodies no route can read: every route that takes a body refuses them the same way.
BAD_BODIES: list[tuple[str, bytes, str, int, str]] = [
    # (what, body, content type, status, code)
    ("not JSON", b"hello there", "application/json", 400, "bad_request"),
    ("truncated JSON", b'{"content": "hi", "client_', "application/json", 400, "bad_request"),
    ("nested too deep", b"[" * 100_000, "application/json", 400, "bad_request"),
    ("a number too long", b'{"content": ' + b"9" * 5000 + b"}", "application/json", 400, "bad_request"),
    ("invalid UTF-8", b'{"content": "\xff\xfe caf\xe9", "client_message_id": "u"}', "application/json", 400, "bad_request"),
    ("no body", b"", "application/json", 400, "bad_request"),
    ("wrong content type", b'{"content": "hi", "client_message_id": "t"}', "text/plain", 415, "unsupported_media_type"),
    ("form data", b"content=hi&client_message_id=f", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ("not an object", b'["content", "hi"]', "application/json", 422, "invalid"),
]

#: Bodies that read as JSON objects but whose message fields are wrong.
BAD_FIELDS: list[tuple[str, bytes, str]] = [
    ("content not a string", b'{"content": 7, "client_message_id": "n"}', "invalid"),
    ("a lone surrogate", b'{"content": "\\ud800", "client_message_id": "s"}', "invalid"),
    ("a NUL", b'{"content": "a\\u0000b", "client_message_id": "z"}', "invalid"),
    ("missing client_message_id", b'{"content": "hi"}', "missing_field"),
    ("client_message_id not a string", b'{"content": "hi", "client_message_id": ["x"]}', "invalid"),
    ("parent not an id", b'{"content": "hi", "client_message_id": "p", "parent_id": "x"}', "invalid"),
    ("parent not in the conversation", b'{"content": "hi", "client_message_id": "q", "parent_id": "%s"}', "unknown_parent"),
    ("a key that names another's reply", b'{"content": "hi", "client_message_id": "m1:reply"}', "reserved_key"),
    ("a model no pool serves", b'{"content": "hi", "client_message_id": "u", "model": "gpt-4o"}', "unknown_model"),
]

#: The other routes that take a body: a field they do not take, or a model no pool serves, is refused by name.
BAD_OTHER_FIELDS: list[tuple[str, str, str, bytes, str]] = [
    ("regenerate, an unknown field", "POST", "/v1/messages/{reply}/regenerate", b'{"client_message_id": "r1", "temprature": 0}', "unknown_field"),
    ("regenerate, an unknown model", "POST", "/v1/messages/{reply}/regenerate", b'{"client_message_id": "r2", "model": "gpt-4o"}', "unknown_model"),
    ("regenerate, a bad sampling", "POST", "/v1/messages/{reply}/regenerate", b'{"client_message_id": "r3", "sampling": {"temperature": 9}}', "invalid"),
    ("leaf, an unknown field", "PUT", "/v1/conversations/{cid}/leaf", b'{"leaf_id": "{reply}", "x": 1}', "unknown_field"),
    ("create, an unknown model", "POST", "/v1/conversations", b'{"model": "gpt-4o"}', "unknown_model"),
    ("create, an unknown field", "POST", "/v1/conversations", b'{"titel": "x"}', "unknown_field"),
]


def _unchanged_tree(world: World) -> None:
    with world.http() as http:
        messages = http.get(f"/v1/conversations/{world.mine.conversation_id}").json()["messages"]
    assert [m["id"] for m in messages] == [world.mine.user_message_id, world.mine.reply_id]


@pytest.mark.parametrize("what,body,content_type,status,code", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_an_unreadable_body_gets_its_4xx_on_every_route_and_appends_nothing(
    world: World, what: str, body: bytes, content_type: str, status: int, code: str
) -> None:
    cid, reply = world.mine.conversation_id, world.mine.reply_id
    paths = [
        ("POST", f"/v1/conversations/{cid}/messages"),
        ("POST", f"/v1/messages/{reply}/regenerate"),
        ("PUT", f"/v1/conversations/{cid}/leaf"),
        ("PUT", "/v1/memory"),
    ]
    with world.http() as http, nothing_appended(world, cid):
        for method, path in paths:
            r = http.request(method, path, content=body, headers={"Content-Type": content_type})
            assert_error(r, status, code)
    _unchanged_tree(world)


@pytest.mark.parametrize("what,body,code", BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_a_bad_message_field_is_422_and_appends_nothing(world: World, what: str, body: bytes, code: str) -> None:
    if b"%s" in body:
        body = body % str(uuid.uuid4()).encode()
    with world.http() as http, nothing_appended(world, world.mine.conversation_id):
        r = http.post(f"/v1/conversations/{world.mine.conversation_id}/messages", content=body, headers={"Content-Type": "application/json"})
        assert_error(r, 422, code)
    _unchanged_tree(world)


@pytest.mark.parametrize("what,method,path,body,code", BAD_OTHER_FIELDS, ids=[b[0] for b in BAD_OTHER_FIELDS])
def test_other_routes_refuse_fields_they_do_not_take_and_unknown_models(
    world: World, what: str, method: str, path: str, body: bytes, code: str
) -> None:
    cid, reply = world.mine.conversation_id, world.mine.reply_id
    path = path.replace("{reply}", reply).replace("{cid}", cid)
    body = body.replace(b"{reply}", reply.encode())
    with world.http() as http, nothing_appended(world, cid):
        r = http.request(method, path, content=body, headers={"Content-Type": "application/json"})
        assert_error(r, 422, code)
    _unchanged_tree(world)


# ------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    "authorization,code",
    [(None, "missing_api_key"), ("Bearer", "missing_api_key"), ("Basic dXNlcjpwdw==", "missing_api_key"), ("Bearer nope", "invalid_api_key")],
)
def test_a_missing_or_invalid_api_key_is_401_everywhere(world: World, authorization: str | None, code: str) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    routes = [
        ("GET", "/v1/conversations", None),
        ("POST", "/v1/conversations", {}),
        ("GET", "/v1/memory", None),
        ("PUT", "/v1/memory", {"facts": []}),
        ("DELETE", "/v1/memory", None),
        *id_routes(world.mine.conversation_id, world.mine.reply_id, world.mine.reply_id),
    ]
    with world.http(key="") as http, nothing_appended(world, world.mine.conversation_id):
        for method, path, body in routes:
            r = http.request(method, path, json=body, headers=headers)
            assert_error(r, 401, code)
            assert r.headers["www-authenticate"] == "Bearer"
