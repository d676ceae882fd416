"""Erasure end to end (DESIGN.md §12): a user who chatted, uploaded a document and set memory is
erased (a request answered 202, the erasure processor's job followed to its end), and ``parley audit
erasure`` finds nothing of theirs in any store, while another user's conversation is intact. Everything runs for real: the stack's processes, Kafka's and Cassandra's
files on disk (flushed), the audit as the operator's command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from parley.kafka import admin, producer_config
from parley.users import create_org, create_user
from tools.client import ApiError, ParleyClient


def _canary() -> str:
    return "zq" + uuid.uuid4().hex[:14]  # one word no text holds by chance


def _audit(stack, *args: str) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    env = {**os.environ, **stack.inner.supervisor.env}
    return subprocess.run(
        [str(Path(sys.executable).with_name("parley")), "audit", "erasure", *args], env=env, capture_output=True, text=True, timeout=300
    )


def _until_clean(stack, *args: str, timeout_s: float = 90.0) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    """The audit again until it passes: the materializer and the document worker finish the deletes beside it."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = _audit(stack, *args)
        if done.returncode == 0 or time.monotonic() > deadline:
            return done
        time.sleep(3)


async def test_an_erased_user_is_gone_from_every_store_and_others_are_untouched(stack) -> None:  # type: ignore[no-untyped-def]
    said, uploaded, remembered, other = _canary(), _canary(), _canary(), _canary()
    user_id, key = stack.inner.create_user("to-erase", "plus")
    me, bystander = ParleyClient(stack.url, key), ParleyClient(stack.url, stack.new_key("plus"))
    web = stack.web_client(user_id)
    try:
        cid = await me.create_conversation("secret plans")
        reply = await me.send(cid, f"Please remember the word {said} for me.")
        assert reply.final.event == "done"
        doc = await me.upload("notes.txt", f"Meeting notes. The code word is {uploaded}.\n".encode(), "text/plain")
        assert (await me.until_processed(doc["id"]))["status"] == "ready"
        await me._json("PUT", "/v1/memory", json={"facts": [f"My locker code is {remembered}"]})
        kept = await bystander.create_conversation("kept")
        await bystander.send(kept, f"Keep this: {other}")

        # Sealed before any erasure: no canary is anywhere on disk in the clear.
        before = _audit(stack, "--canary", said, "--canary", uploaded, "--canary", remembered, "--canary", other)
        assert before.returncode == 0, before.stdout + before.stderr
        # The audit of a user who was not erased fails: their key and rows are there.
        assert _audit(stack, user_id).returncode == 1

        with pytest.raises(ApiError) as by_key:
            await me._json("DELETE", "/v1/me", params={"confirm": "true"})
        assert (by_key.value.status, by_key.value.body["error"]["code"]) == (403, "insufficient_scope")  # only the session erases
        with pytest.raises(ApiError) as refused:
            await web._json("DELETE", "/v1/me")
        assert refused.value.status == 422  # ?confirm=true is required
        asked = await web._http.request("DELETE", "/v1/me", params={"confirm": "true"})
        assert asked.status_code == 202, asked.text  # the job carries it out (streams/erasure.py)
        erasure = asked.json()["erasure"]
        assert (asked.json()["id"], erasure["status"], erasure["by"]) == (user_id, "requested", "self")
        with pytest.raises(ApiError) as gone:
            await me.conversations()
        assert gone.value.status == 401  # refused at once: the erasing gateway forgets the key

        followed = _parley(stack, "users", "erasure", user_id, "--wait", "120")
        assert followed.returncode == 0 and "done" in followed.stderr, followed.stdout + followed.stderr
        assert "1 conversations, 1 documents deleted" in followed.stderr, followed.stderr
        done = _until_clean(stack, user_id, "--canary", said, "--canary", uploaded, "--canary", remembered)
        assert done.returncode == 0, done.stdout + done.stderr

        conversation = await bystander.conversation(kept)
        assert [m["content"] for m in conversation["messages"] if m["role"] == "user"] == [f"Keep this: {other}"]
    finally:
        await me.close()
        await web.close()
        await bystander.close()


def _parley(stack, *args: str) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    env = {**os.environ, **stack.inner.supervisor.env}
    return subprocess.run([str(Path(sys.executable).with_name("parley")), *args], env=env, capture_output=True, text=True, timeout=300)


async def test_the_operator_erases_a_user_with_the_cli(stack) -> None:  # type: ignore[no-untyped-def]
    """``parley users erase USER --confirm``: the gateway's erasure, from the operator's seat."""
    said = _canary()
    user_id, key = stack.inner.create_user("cli-erase", "plus")
    me = ParleyClient(stack.url, key)
    try:
        cid = await me.create_conversation("to go")
        assert (await me.send(cid, f"The word is {said}.")).final.event == "done"
        unconfirmed = _parley(stack, "users", "erase", user_id)
        assert unconfirmed.returncode == 1 and "--confirm" in unconfirmed.stderr
        assert _parley(stack, "users", "erase", "u_nobody", "--confirm").returncode == 1
        done = _parley(stack, "users", "erase", user_id, "--confirm", "--wait", "120")
        assert done.returncode == 0 and "1 conversations" in done.stderr, done.stdout + done.stderr
        again = _parley(stack, "users", "erase", user_id, "--confirm", "--wait", "120")  # an erased user, asked for again
        assert again.returncode == 0 and "done" in again.stderr, again.stdout + again.stderr
        audited = _until_clean(stack, user_id, "--canary", said)
        assert audited.returncode == 0, audited.stdout + audited.stderr
        deadline = time.monotonic() + 60  # the gateway's auth cache (PARLEY_GATEWAY_AUTH_CACHE_S) lets the key go
        while (status := (await me._http.get("/v1/conversations")).status_code) != 401 and time.monotonic() < deadline:
            await asyncio.sleep(1)
        assert status == 401
    finally:
        await me.close()


async def test_an_admin_erases_a_member_and_follows_the_job_to_its_end(stack) -> None:  # type: ignore[no-untyped-def]
    """202 with the job's status, then GET /v1/org/users/{id}/erasure until done; an erased member may be asked
    for again, and another organisation's admin sees none of it."""
    session = stack.inner.session
    team = create_org(session, "erasing team")
    member_id, member_key = create_user(session, "member", "plus", org_id=team)
    admin_id, _ = create_user(session, "admin", "plus", org_id=team, role="admin")
    stranger_id, _ = create_user(session, "stranger", "plus", org_id=create_org(session, "elsewhere"), role="admin")
    member, admin, stranger = ParleyClient(stack.url, member_key), stack.web_client(admin_id), stack.web_client(stranger_id)
    try:
        cid = await member.create_conversation("team notes")
        assert (await member.send(cid, "A note for the team.")).final.event == "done"
        assert (await admin._json("GET", f"/v1/org/users/{member_id}/erasure")) == {"id": member_id, "erasure": None}
        asked = await admin._http.request("DELETE", f"/v1/org/users/{member_id}", params={"confirm": "true"})
        assert asked.status_code == 202 and asked.json()["erasure"]["by"] == "admin", asked.text
        with pytest.raises(ApiError) as refused:
            await member.conversations()
        assert refused.value.status == 401
        first = await _until_done(admin, member_id)
        assert (first["conversations"], first["documents"]) == (1, 0) and all(first["steps"].values())
        again = await admin._http.request("DELETE", f"/v1/org/users/{member_id}", params={"confirm": "true"})
        assert again.status_code == 202 and again.json()["erasure"]["request_id"] != first["request_id"]
        assert (await _until_done(admin, member_id))["request_id"] == again.json()["erasure"]["request_id"]
        with pytest.raises(ApiError) as elsewhere:
            await stranger._json("GET", f"/v1/org/users/{member_id}/erasure")
        assert elsewhere.value.status == 404
    finally:
        for client in (member, admin, stranger):
            await client.close()


async def _until_done(admin: ParleyClient, user_id: str, timeout_s: float = 120.0) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    while (erasure := (await admin._json("GET", f"/v1/org/users/{user_id}/erasure"))["erasure"])["status"] != "done":
        assert time.monotonic() < deadline, f"the erasure job stopped at {erasure['status']}"
        await asyncio.sleep(1)
    return erasure


async def test_the_audit_finds_a_canary_written_in_the_clear(stack) -> None:  # type: ignore[no-untyped-def]
    """The control: the same scan over the same files fails when the text is there."""
    canary, topic = _canary(), f"{stack.kafka.topic_prefix}erasure-control"
    client = admin(stack.kafka)  # held: a collected admin client destroys its pending futures
    for created in client.create_topics([NewTopic(topic, 1, 1)]).values():
        created.result(30)
    producer, delivered = Producer(producer_config(stack.kafka)), []
    producer.produce(topic, value=f"plain {canary} text".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0 and delivered == [None]
    found = _audit(stack, "--canary", canary)
    assert found.returncode == 1 and "kafka" in found.stdout, found.stdout + found.stderr
