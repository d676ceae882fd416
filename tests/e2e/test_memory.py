"""User memory through the whole stack: PUT, GET, DELETE, and bad input."""

from __future__ import annotations

import asyncio
import time
import uuid

from schemas import sealing
from parley.cassandra import connect
from parley.kafka import EventProducer
from schemas.events import MemoryUpdated
from streams.memory import fact


async def test_memory_is_replaced_read_back_and_cleared(stack) -> None:
    client = stack.client()
    http = client._http
    try:
        r = await http.put("/v1/memory", json={"facts": ["I prefer metric units", "My name is Ada", "I prefer metric units"]})
        assert r.status_code == 200
        assert [f["text"] for f in r.json()["facts"]] == ["I prefer metric units", "My name is Ada"]
        got = (await http.get("/v1/memory")).json()["facts"]
        assert [f["text"] for f in got] == ["I prefer metric units", "My name is Ada"]  # the order given

        other = stack.client(stack.new_key())
        assert (await other._http.get("/v1/memory")).json()["facts"] == []  # per user
        await other.close()

        assert (await http.put("/v1/memory", json={"facts": "not a list"})).status_code == 422
        assert (await http.put("/v1/memory", json={"facts": ["x" * 600]})).status_code == 413
        assert (await http.put("/v1/memory", json={"facts": [""]})).status_code == 422

        assert (await http.delete("/v1/memory")).json() == {"facts": []}
        assert (await http.get("/v1/memory")).json()["facts"] == []
    finally:
        await client.close()


async def test_the_materializer_projects_memory_from_the_log(stack) -> None:
    """A snapshot appended to user.memory (not through the gateway) lands in user_memory."""
    user_id = f"u_log_{uuid.uuid4().hex[:8]}"
    producer = EventProducer(stack.kafka)
    try:
        producer.produce_sync(MemoryUpdated(user_id=user_id, facts=[fact(user_id, "Remember the log", sealing.sealer())]))
    finally:
        producer.close()
    session = connect(stack.cassandra, stack.cassandra.keyspace)
    try:
        deadline = time.monotonic() + 60
        rows: list = []
        while not rows and time.monotonic() < deadline:
            rows = session.execute("SELECT fact_id, text FROM user_memory WHERE user_id = %s", (user_id,)).all()
            await asyncio.sleep(0.3)
        assert [sealing.open_text(r.text, at=sealing.cell_at("user_memory", "text", r.fact_id)) for r in rows] == ["Remember the log"]
        assert all(sealing.is_sealed(r.text) for r in rows)  # on disk, ciphertext (DESIGN.md §12)
    finally:
        session.cluster.shutdown()


async def test_memory_is_rendered_into_prompts_in_order(stack) -> None:
    from tests.e2e.test_chat_turn import _prompts

    key = stack.new_key("plus")
    client = stack.client(key)
    try:
        await client._http.put("/v1/memory", json={"facts": ["I live in Lisbon", "I am vegetarian"]})
        cid = await client.create_conversation()
        deadline = time.monotonic() + 30
        while True:  # the context builder follows user.memory; give it a moment to see the update
            reply = await client.send(cid, "Suggest a dinner place")
            prompt = next(p for p in _prompts(stack, {cid})[cid] if p.request_id == reply.head["reply_id"])
            text = "\n".join(m.content for m in prompt.messages)
            if "Lisbon" in text or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert text.index("I live in Lisbon") < text.index("I am vegetarian")
        assert prompt.messages[-1].content == "Suggest a dinner place"
    finally:
        await client.close()
