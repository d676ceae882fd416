"""Moderation beside generation (issue 18), on the shared e2e stack with its real moderation processor.

A flagged input stops its turn; a reply that turns bad after clean text
(the synthetic engine's ``[[insert:N:BASE64]]`` script) is cut within
``window + overlap`` tokens of the bad sentence; a clean conversation is never
touched; the processor SIGKILLed mid-reply still checks it after its restart;
``POST /v1/moderations`` answers the official ``openai`` client. No timing
assertions: each wait has a deadline that fails the test, not a bound it checks.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from typing import Any

import httpx
import openai
import pytest

from moderation.settings import ModerationSettings
from parley.settings import KafkaSettings, from_env
from schemas.endings import FILTERED_NOTICE
from schemas.events import ModerationResult, UsageRecorded
from parley.users import create_org, create_user
from tools.client import ApiError, ParleyClient
from tools.topology import MODERATION
from tests.e2e.topic_events import events_of

#: Plainly a threat: every classifier Parley ships flags it (harassment/threatening, violence).
BAD_INPUT = "I am going to kill you tonight, you worthless idiot."
BAD_SENTENCE = "I am going to kill you and burn down your house tonight."
SETTINGS = from_env(ModerationSettings)  # the stack's windows: the e2e env leaves the defaults
DEADLINE_S = 90.0


def script(sentence: str, after: int) -> str:
    """The synthetic engine's directive: ``sentence`` in the reply after its first ``after`` pieces."""
    return f"[[insert:{after}:{base64.urlsafe_b64encode(sentence.encode()).decode().rstrip('=')}]]"


def pieces(text: str) -> list[str]:
    """The synthetic engine's tokens: words and periods."""
    return re.findall(r"[A-Za-z']+|\.", text)


async def settled_reply(client: ParleyClient, cid: str, reply_id: str, until: Any) -> dict[str, Any]:
    """The stored reply once ``until(message)`` holds (its verdict may land after the stream ended)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        messages = {m["id"]: m for m in (await client.conversation(cid))["messages"]}
        reply = messages.get(reply_id)
        if reply is not None and until(reply):
            return {"reply": reply, "messages": messages}
        assert time.monotonic() < deadline, f"the stored reply never settled: {reply}"
        await asyncio.sleep(0.3)


def results_of(kafka: KafkaSettings, request_id: str, done: Any) -> list[ModerationResult]:
    """The ModerationResults of ``request_id`` on chat.moderation, read until ``done(results)`` holds."""
    return events_of(kafka, "chat.moderation", ModerationResult, request_id, done)


def filtered(message: dict[str, Any]) -> bool:
    return message["finish_reason"] == "content_filter" and "moderation" in message


async def test_a_flagged_input_is_stopped_and_the_turn_ends_content_filter(stack) -> None:
    client = stack.client()
    try:
        cid = await client.create_conversation()
        reply = await client.send(cid, BAD_INPUT, max_tokens=600)
        assert reply.final is not None and reply.final.event == "done", reply.final
        assert reply.final.data["finish_reason"] == "content_filter"
        assert reply.final.data["notice"] == FILTERED_NOTICE
        reply_id = reply.head["reply_id"]
        stored = await settled_reply(client, cid, reply_id, filtered)
        assert stored["reply"]["content"] == FILTERED_NOTICE and stored["reply"]["status"] == "filtered"
        assert stored["reply"]["moderation"]["direction"] == "input" and stored["reply"]["moderation"]["categories"]
        question = stored["messages"][stored["reply"]["parent_id"]]
        assert question["content"] == BAD_INPUT and question["moderation"]["direction"] == "input"  # the user's own words stay
        (result,) = results_of(stack.kafka, reply_id, lambda rs: any(r.stage == "input" for r in rs))[:1]
        assert result.verdict == "flagged" and result.direction == "input" and result.model
        assert result.text is None  # the default policy keeps no flagged text
        (usage,) = events_of(stack.kafka, "chat.usage", UsageRecorded, reply_id, lambda us: len(us) >= 1)
        assert usage.finish_reason == "content_filter"
        # The conversation goes on: a clean turn after it is answered.
        after = await client.send(cid, "Let us talk about gardening instead.", max_tokens=20)
        assert after.final is not None and after.final.data["finish_reason"] in ("stop", "length")
    finally:
        await client.close()


def policy_reads(stack) -> float:  # type: ignore[no-untyped-def]
    """How often the moderation processor has read organisations' policies (parley_moderation_org_policy_reads)."""
    child = next(c for c in reversed(stack.inner.supervisor.children) if c.service.name == MODERATION.name)
    text = httpx.get(str(child.metrics_url), timeout=10).text
    return sum(float(v) for v in re.findall(r'^parley_moderation_org_policy_reads_total\{outcome="read"\} (\S+)$', text, re.M))


async def test_an_organisation_cannot_loosen_moderation_and_a_personal_one_sets_none(stack) -> None:
    team = create_org(stack.inner.session, "loose-co")
    admin_id, admin_key = create_user(stack.inner.session, "admin", "free", org_id=team, role="admin")
    solo_id, solo_key = stack.inner.create_user("solo", "free")  # administers its own personal organisation
    admin, solo = stack.client(admin_key), stack.client(solo_key)
    # An organisation's settings are its admin's web session's to change (the admin scope; keys chat).
    admin_web, solo_web = stack.web_client(admin_id), stack.web_client(solo_id)
    try:
        loosen = {"block": [], "thresholds": {"violence": 1.0, "harassment/threatening": 1.0}, "default_threshold": 1.0}
        with pytest.raises(ApiError) as personal:
            await solo_web._json("PATCH", "/v1/org", json={"moderation_policy": loosen})
        assert personal.value.status == 409 and personal.value.body["error"]["code"] == "personal_org"
        stored = await admin_web._json("PATCH", "/v1/org", json={"moderation_policy": loosen})
        assert stored["moderation_policy"]["block"] == []  # kept as written; it only ever adds to the tier's
        # Two reads of the policies after the write began: the loosening policy is in force.
        before = policy_reads(stack)
        deadline = time.monotonic() + DEADLINE_S
        while policy_reads(stack) < before + 2:
            assert time.monotonic() < deadline, "the moderation processor never read the organisations' policies again"
            await asyncio.sleep(0.5)
        for client in (admin, solo):
            cid = await client.create_conversation()
            reply = await client.send(cid, BAD_INPUT, max_tokens=600)
            assert reply.final is not None and reply.final.data["finish_reason"] == "content_filter", reply.final
    finally:
        await admin_web.close()
        await solo_web.close()
        await admin.close()
        await solo.close()


async def test_a_reply_that_turns_bad_is_cut_within_a_window_and_its_overlap(stack) -> None:
    client = stack.client()
    try:
        cid = await client.create_conversation()
        reply = await client.send(cid, f"Tell me a long story. {script(BAD_SENTENCE, 60)}", max_tokens=800)
        assert reply.final is not None and reply.final.event == "done", reply.final
        assert reply.final.data["finish_reason"] == "content_filter"
        streamed = reply.text
        assert BAD_SENTENCE in streamed, "the scripted sentence was not streamed before the cut"
        past = pieces(streamed[streamed.index(BAD_SENTENCE) + len(BAD_SENTENCE) :])
        assert len(past) <= SETTINGS.window_tokens + SETTINGS.overlap_tokens, f"{len(past)} tokens streamed past the violation"
        assert len(pieces(streamed)) < 800  # it was cut, not finished
        reply_id = reply.head["reply_id"]
        stored = await settled_reply(client, cid, reply_id, filtered)
        assert stored["reply"]["content"] == FILTERED_NOTICE
        assert stored["reply"]["moderation"]["direction"] == "output" and stored["reply"]["moderation"]["action"] == "cut"
        flagged = [r for r in results_of(stack.kafka, reply_id, lambda rs: any(r.verdict == "flagged" for r in rs)) if r.verdict == "flagged"]
        assert flagged[0].stage == "window" and flagged[0].window_end - flagged[0].window_start <= SETTINGS.window_tokens + SETTINGS.overlap_tokens
    finally:
        await client.close()


async def test_a_clean_conversation_is_never_touched(stack) -> None:
    client = stack.client()
    try:
        cid = await client.create_conversation()
        for question in ("What grows well in a shady garden?", "How do I kill the process that holds port 8080?"):
            reply = await client.send(cid, question, max_tokens=450)
            assert reply.final is not None and reply.final.data["finish_reason"] in ("stop", "length"), reply.final
            reply_id = reply.head["reply_id"]
            results = results_of(stack.kafka, reply_id, lambda rs: any(r.stage == "final" for r in rs))
            assert {r.verdict for r in results} == {"clean"}
            assert {r.stage for r in results} >= {"input", "window", "final"}  # 450 tokens: at least one window
            stored = (await settled_reply(client, cid, reply_id, lambda m: m["status"] == "complete"))["reply"]
            assert stored["content"] == reply.text and "moderation" not in stored
    finally:
        await client.close()


async def test_the_moderations_endpoint_answers_the_official_openai_client(stack) -> None:
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=stack.key, max_retries=0, timeout=60)
    try:
        answer = await client.moderations.create(model="omni-moderation-latest", input=["What a lovely day for a walk.", BAD_INPUT])
        assert answer.model.startswith("parley-")  # the classifier that actually scored it, not the name asked for
        clean, bad = answer.results
        assert not clean.flagged and bad.flagged
        assert bad.categories.harassment_threatening or bad.categories.violence
        assert 0.0 <= bad.category_scores.violence <= 1.0
        parts = await client.moderations.create(input=[{"type": "text", "text": BAD_INPUT}])
        assert parts.results[0].flagged
        with pytest.raises(openai.BadRequestError, match="image inputs are not supported"):
            await client.moderations.create(input=[{"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}])
        with pytest.raises(openai.BadRequestError, match="not served here"):
            await client.moderations.create(model="gpt-4o", input="hello")
        with pytest.raises(openai.AuthenticationError):
            await openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="nope", max_retries=0).moderations.create(input="x")
    finally:
        await client.close()


async def test_the_processor_killed_mid_reply_still_checks_it_after_restart(stack) -> None:
    """SIGKILL (no last commit), restart: the reply's bad sentence is still found, once, and the turn after it
    is untouched. Runs last in this module: it restarts the shared stack's moderation processor."""
    client = stack.client()
    supervisor = stack.inner.supervisor
    try:
        cid = await client.create_conversation()
        stream = client.stream_message(cid, f"Another story, please. {script(BAD_SENTENCE, 350)}", max_tokens=700)
        head = None
        async for event in stream:
            if event.event == "message":
                head = event.data
            if event.event == "delta":  # the reply is streaming and the bad sentence is still ahead
                child = next(c for c in reversed(supervisor.children) if c.service.name == MODERATION.name)
                child.process.kill()
                child.process.wait(30)
                break
        await stream.aclose()
        assert head is not None
        supervisor.wait_ready(supervisor.start(MODERATION))
        stored = await settled_reply(client, cid, head["reply_id"], filtered)
        assert stored["reply"]["content"] == FILTERED_NOTICE and stored["reply"]["moderation"]["direction"] == "output"
        flagged = results_of(stack.kafka, head["reply_id"], lambda rs: any(r.verdict == "flagged" for r in rs))
        assert any(r.verdict == "flagged" for r in flagged)
        after = await client.send(cid, "Thanks. What is the capital of Norway?", max_tokens=20)
        assert after.final is not None and after.final.data["finish_reason"] in ("stop", "length")
        stored_after = await settled_reply(client, cid, after.head["reply_id"], lambda m: m["status"] == "complete")
        assert "moderation" not in stored_after["reply"]
    finally:
        await client.close()
