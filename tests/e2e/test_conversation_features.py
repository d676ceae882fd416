"""Stop, regenerate, edit into branches, select a leaf, resume on another gateway, abandonment.

A stack of its own whose engine is slow (20 tokens/s, 160-token replies), so
there is time to stop, drop and resume mid-reply, plus a second gateway."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from parley.settings import CassandraSettings, KafkaSettings, from_env
from tests.e2e.test_chat_turn import _prompts
from tools import isolated
from tools.client import ParleyClient, parse_sse
from tools.topology import CHAT_PATH, GATEWAY

SLOW_ENV = {
    "PARLEY_ENGINE_BACKEND": "synthetic",
    "PARLEY_ENGINE_TTFT_MS": "50",
    "PARLEY_ENGINE_TOKENS_PER_S": "20",
    "PARLEY_CONTEXT_MAX_TOKENS": "160",
    "PARLEY_GATEWAY_ABANDON_GRACE_S": "3",
}


class Slow:
    def __init__(self, inner: isolated.IsolatedStack, second_url: str) -> None:
        self.inner, self.url, self.second_url = inner, inner.url, second_url
        self.kafka = inner.kafka
        _, self.key = inner.create_user("features", "plus")

    def client(self, url: str | None = None) -> ParleyClient:
        return ParleyClient(url or self.url, self.key)


@pytest.fixture(scope="module")
def slow(infra, tmp_path_factory) -> Iterator[Slow]:
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), "e2eslow")
    inner = isolated.start(kafka, cassandra, tmp_path_factory.mktemp("slow-logs"), SLOW_ENV, CHAT_PATH)
    try:
        port = isolated.free_port()
        second = inner.supervisor.start(
            GATEWAY, name="gateway-2", extra_env={"PARLEY_GATEWAY_PORT": str(port)}, ports={"gateway_port": port}
        )
        inner.supervisor.wait_ready(second)
        yield Slow(inner, f"http://127.0.0.1:{port}")
    finally:
        inner.stop()
        isolated.drop(kafka, cassandra)


async def _stored(client: ParleyClient, cid: str, message_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        conv = await client.conversation(cid)
        found = next((m for m in conv["messages"] if m["id"] == message_id), None)
        if (found and found["status"] not in (None, "streaming")) or time.monotonic() > deadline:
            return found or {}
        await asyncio.sleep(0.2)


async def _read_some(client: ParleyClient, cid: str, text: str, deltas: int) -> tuple[dict, list]:
    """Post, read the head and ``deltas`` deltas, then drop the connection."""
    got = []
    async for event in client.stream_message(cid, text):
        got.append(event)
        if sum(e.event == "delta" for e in got) >= deltas:
            break
    return got[0].data, got


async def test_stop_mid_stream_cancels_in_the_engine_and_keeps_the_partial_text(slow: Slow) -> None:
    client = slow.client()
    try:
        cid = await client.create_conversation()
        events, stop_sent = [], None
        async for event in client.stream_message(cid, "Write a long story"):
            events.append(event)
            if event.event == "delta" and stop_sent is None and sum(e.event == "delta" for e in events) == 5:
                reply_id = events[0].data["reply_id"]
                async with httpx.AsyncClient() as http:
                    r = await http.post(f"{slow.url}/v1/messages/{reply_id}/stop", headers={"Authorization": f"Bearer {slow.key}"})
                assert r.status_code == 200 and r.json()["stopping"] is True
                stop_sent = time.perf_counter()
        final = events[-1]
        assert final.event == "done" and final.data["finish_reason"] == "cancelled"
        stop_to_done_ms = (time.perf_counter() - stop_sent) * 1000
        print(f"\nstop → cancelled done seen by the client: {stop_to_done_ms:.0f} ms")
        streamed = "".join(e.data["text"] for e in events if e.event == "delta")
        tokens = final.data["usage"]["completion_tokens"]
        assert 5 <= tokens < 160, "the engine stopped generating well before the cap"
        stored = await _stored(client, cid, final.data["message_id"])
        assert stored["status"] == "cancelled" and stored["finish_reason"] == "cancelled"
        assert stored["content"] == streamed

        again = await client._http.post(f"/v1/messages/{final.data['message_id']}/stop")
        assert again.status_code == 200 and again.json()["stopping"] is False  # finished: a no-op
    finally:
        await client.close()


async def test_deleting_a_conversation_mid_reply_cancels_the_reply(slow: Slow) -> None:
    client = slow.client()
    try:
        cid = await client.create_conversation()
        events: list = []
        async for event in client.stream_message(cid, "Write a long story"):
            events.append(event)
            if event.event == "delta" and sum(e.event == "delta" for e in events) == 3:
                async with httpx.AsyncClient() as http:
                    r = await http.delete(f"{slow.url}/v1/conversations/{cid}", headers={"Authorization": f"Bearer {slow.key}"})
                assert r.status_code == 204
        # The reply stops in the engine (its text would otherwise keep reaching the deleted rows).
        assert events[-1].event == "done" and events[-1].data["finish_reason"] == "cancelled"
        assert events[-1].data["usage"]["completion_tokens"] < 160
    finally:
        await client.close()


#: The tree test's replies: its subject is their places, not their length (the module's engine writes 20 tokens/s).
SHORT = 6


async def test_regenerate_twice_and_edit_once_make_the_expected_tree(slow: Slow) -> None:
    client = slow.client()
    try:
        cid = await client.create_conversation()
        first = await client.send(cid, "Question one", max_tokens=SHORT)
        q1, a1 = first.head["user_message_id"], first.head["reply_id"]

        async def regenerate(reply_id: str) -> dict:
            body = {"client_message_id": uuid.uuid4().hex, "max_tokens": SHORT}
            async with client._http.stream("POST", f"/v1/messages/{reply_id}/regenerate", json=body) as r:
                assert r.status_code == 200
                events = [e async for e in parse_sse(r.aiter_lines())]
            assert events[-1].event == "done"
            return events[0].data

        r2 = await regenerate(a1)
        r3 = await regenerate(a1)
        assert r2["user_message_id"] == r3["user_message_id"] == q1
        edited = await client.send(cid, "Question one, edited", parent_id=None, max_tokens=SHORT)  # an edit of the first message
        q1b, a1b = edited.head["user_message_id"], edited.head["reply_id"]
        for rid in (r2["reply_id"], r3["reply_id"], a1b):
            await _stored(client, cid, rid)

        conv = await client.conversation(cid)
        parent = {m["id"]: m["parent_id"] for m in conv["messages"]}
        assert parent[a1] == parent[r2["reply_id"]] == parent[r3["reply_id"]] == q1  # three sibling replies
        assert parent[q1] is None and parent[q1b] is None  # the edit is a sibling of the first message
        assert parent[a1b] == q1b
        assert conv["selected_leaf_id"] == a1b

        # Switch back to the first branch: the next turn's prompt holds that branch only.
        r = await client._http.put(f"/v1/conversations/{cid}/leaf", json={"leaf_id": r2["reply_id"]})
        assert r.status_code == 200
        assert (await client.conversation(cid))["selected_leaf_id"] == r2["reply_id"]
        follow = await client.send(cid, "Follow-up on branch one", max_tokens=SHORT)
        assert (await client.conversation(cid))["messages"] and parent.get(follow.head["user_message_id"]) is None
        conv = await client.conversation(cid)
        assert {m["id"]: m["parent_id"] for m in conv["messages"]}[follow.head["user_message_id"]] == r2["reply_id"]
        prompt = next(p for p in _prompts(slow, {cid})[cid] if p.request_id == follow.head["reply_id"])
        contents = [m.content for m in prompt.messages]
        assert "Question one" in contents and "Question one, edited" not in contents
        replies = {m["id"]: m["content"] for m in conv["messages"]}
        assert replies[r2["reply_id"]] in contents
        assert replies[r3["reply_id"]] not in contents or replies[r3["reply_id"]] == replies[r2["reply_id"]]
    finally:
        await client.close()


async def test_a_dropped_stream_resumes_on_another_gateway_without_gap_or_duplicate(slow: Slow) -> None:
    one, two = slow.client(), slow.client(slow.second_url)
    try:
        cid = await one.create_conversation()
        head, seen = await _read_some(one, cid, "Tell me a long one", deltas=4)
        cursor = [e for e in seen if e.event == "delta"][-1].id
        first_part = "".join(e.data["text"] for e in seen if e.event == "delta")
        async with two._http.stream(
            "GET", f"/v1/messages/{head['reply_id']}/stream", headers={"Last-Event-ID": cursor}
        ) as r:
            assert r.status_code == 200
            rest = [e async for e in parse_sse(r.aiter_lines())]
        assert rest[-1].event == "done"
        text = first_part + "".join(e.data["text"] for e in rest if e.event == "delta")
        stored = await _stored(two, cid, head["reply_id"])
        assert stored["content"] == text

        # Without a cursor: the whole reply again, from storage now that it is finished.
        async with two._http.stream("GET", f"/v1/messages/{head['reply_id']}/stream") as r:
            again = [e async for e in parse_sse(r.aiter_lines())]
        assert "".join(e.data["text"] for e in again if e.event == "delta") == text
        bad = await two._http.get(f"/v1/messages/{head['reply_id']}/stream", headers={"Last-Event-ID": "garbage"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_cursor"
    finally:
        await one.close()
        await two.close()


async def test_an_abandoned_reply_is_cancelled_and_a_resumed_one_is_not(slow: Slow) -> None:
    client = slow.client()
    try:
        cid = await client.create_conversation()
        abandoned, _ = await _read_some(client, cid, "Nobody will read this", deltas=2)
        resumed, seen = await _read_some(client, cid, "Somebody will read this", deltas=2)
        cursor = [e for e in seen if e.event == "delta"][-1].id
        async with client._http.stream("GET", f"/v1/messages/{resumed['reply_id']}/stream", headers={"Last-Event-ID": cursor}) as r:
            rest = [e async for e in parse_sse(r.aiter_lines())]
        assert rest[-1].event == "done" and rest[-1].data["finish_reason"] in ("stop", "length")

        gone = await _stored(client, cid, abandoned["reply_id"])
        assert gone["status"] == "cancelled", "abandoned after the 3 s grace period"
        kept = await _stored(client, cid, resumed["reply_id"])
        assert kept["status"] == "complete"
    finally:
        await client.close()
