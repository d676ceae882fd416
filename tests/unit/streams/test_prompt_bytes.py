"""Prompts and records: what a prompt weighs on Kafka once sealed, a window that moves to fit a record,
and a turn whose prompt no record can hold ending ``context_too_long`` (review H5).

Sealing is the real format (AES-GCM, base64url, the owner and key version in front), through a
stand-in key service that holds one key: the sizes are the sizes the consumers see.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from schemas import codec, sealing
from schemas import events as ev
from schemas.endings import CONTEXT_TOO_LONG
from streams.context import ContextBuilder
from streams.prompt_bytes import ROUTED_BYTES, sealed_bytes, wire_bytes
from streams.settings import ContextSettings
from streams.tree import Conversation, empty

RECORD = 40_000  # the consumers' limit in these tests (512 KiB in life)
#: A token budget that never binds: only bytes move the window (a 128k-token model's budget does the same at 512 KiB).
CFG = ContextSettings(system_prompt="sys", budget_tokens=10_000_000, summary_tokens=100, tokenizer="words")


class OneKey:
    """Seals as parley/keys.py does (the same format and lengths), under one fixed key."""

    def __init__(self) -> None:
        self._aead = AESGCM(AESGCM.generate_key(bit_length=256))

    def seal(self, user_id: str, text: str, *, at: str, deterministic: bool = False) -> str:
        nonce = os.urandom(12)
        body = base64.urlsafe_b64encode(nonce + self._aead.encrypt(nonce, text.encode(), at.encode())).decode().rstrip("=")
        return f"{sealing.PREFIX}{user_id}:1:{body}"

    def open(self, value: str, *, at: str) -> str:
        body = value.rsplit(":", 1)[1]
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        return self._aead.decrypt(raw[:12], raw[12:], at.encode()).decode()

    async def prefetch(self, user_ids: object, *, create: bool = False) -> None:
        return None


@pytest.fixture
def sealed() -> Iterator[None]:
    sealing.install(OneKey())  # type: ignore[arg-type]
    yield
    sealing.install(None)


class Rows:
    async def load(self, conversation_id: str) -> Conversation:
        return empty(conversation_id)


def _routed(req: ev.InferenceRequested) -> ev.InferenceRouted:
    return ev.InferenceRouted(
        conversation_id=req.conversation_id, user_id=req.user_id, trace_id=req.trace_id, request=req, pool="frontier",
        model="a-model-name-of-some-length", partition=11, route_reason="escalated", downgraded_from="medium",
    )


def test_a_sealed_prompt_never_outweighs_its_measure_and_routing_fits_in_the_margin(sealed: None) -> None:
    user = "user-" + "x" * 60
    for text in ["", "a", "héllo wörld " * 3, "日本語のテキスト" * 500, "x" * 100_000]:
        assert len(codec.encode(ev.MessagePosted(conversation_id=str(uuid.uuid4()), user_id=user, message_id=str(uuid.uuid4()), client_message_id="c", content=text))) > 0
        req = ev.InferenceRequested(
            conversation_id=str(uuid.uuid4()), user_id=user, request_id=str(uuid.uuid4()), parent_id=str(uuid.uuid4()),
            messages=[ev.PromptMessage(role="system", content="sys"), ev.PromptMessage(role="user", content=text)] * 3,
            sampling=ev.Sampling(stop=["###"]),
        )
        measured, actual = wire_bytes(req), len(codec.encode(req))
        assert actual <= measured <= actual + 600  # an upper bound, and a tight one
        assert len(codec.encode(_routed(req))) <= measured + ROUTED_BYTES
    assert sealed_bytes("", user) == 1


async def _conversation(builder: ContextBuilder, turns: int, size: int) -> list[ev.Event]:
    cid, parent, out = str(uuid.uuid4()), None, []
    common = {"conversation_id": cid, "user_id": "u"}
    for k in range(turns):
        mid, rid = str(uuid.uuid4()), str(uuid.uuid4())
        await builder.handle(ev.MessagePosted(**common, message_id=mid, parent_id=parent, client_message_id=f"c{k}", content=f"q{k} " + "word " * (size // 5)))
        out += await builder.handle(ev.GenerationRequested(**common, request_id=rid, parent_id=mid, client_message_id=f"c{k}"))
        await builder.handle(ev.GenerationCompleted(**common, request_id=rid, parent_id=mid, finish_reason="stop", content=f"a{k} " + "reply " * (size // 6)))
        parent = rid
    return out


async def test_a_long_conversation_is_windowed_to_fit_a_record_whatever_the_token_budget(sealed: None) -> None:
    builder = ContextBuilder(CFG, Rows(), record_bytes=RECORD)
    out = await _conversation(builder, turns=20, size=2_000)  # 80 kB of text, sealed: over twice the record
    reqs = [e for e in out if isinstance(e, ev.InferenceRequested)]
    assert len(reqs) == 20
    for req in reqs:
        assert len(codec.encode(_routed(req))) <= RECORD  # both records every consumer reads
    assert not reqs[-1].messages[1].content.startswith("q0 ")  # the oldest turns left out
    assert reqs[-1].messages[-1].content.startswith("q19 ")  # the question always kept
    # The window moves by blocks of a quarter of the record (as for tokens): two turns of ~5 kB sealed at a
    # time here, so no two turns in a row move it, where dropping a turn at a time would move it on every one.
    firsts = [r.messages[1].content for r in reqs]
    moves = [k for k in range(1, len(reqs)) if firsts[k] != firsts[k - 1]]
    assert len(moves) >= 3 and all(b - a >= 2 for a, b in zip(moves, moves[1:]))


def _as_sent_turn(cid: str, texts: list[str]) -> list[ev.Event]:
    common = {"conversation_id": cid, "user_id": "u"}
    events: list[ev.Event] = [ev.ConversationCreated(**common)]
    parent = None
    for k, text in enumerate(texts):
        mid = str(uuid.uuid4())
        role = "user" if k % 2 == 0 else "assistant"
        events.append(ev.MessagePosted(**common, message_id=mid, parent_id=parent, client_message_id=f"h{k}", role=role, content=text))
        parent = mid
    events.append(ev.GenerationRequested(**common, request_id=str(uuid.uuid4()), parent_id=parent, client_message_id="r", as_sent=True))
    return events


async def test_an_as_sent_history_over_a_record_ends_context_too_long_and_a_smaller_one_goes_out(sealed: None) -> None:
    builder = ContextBuilder(CFG, Rows(), record_bytes=RECORD)
    out: list[ev.Event] = []
    for e in _as_sent_turn(str(uuid.uuid4()), ["question " * 1000, "answer " * 1000, "again " * 2000]):  # ~33 kB, sealed ~45 kB
        out = await builder.handle(e)
    completed, chunk = out
    assert isinstance(completed, ev.GenerationCompleted) and isinstance(chunk, ev.TokenChunk)
    assert (completed.finish_reason, completed.error_code, chunk.error_code) == ("failed", CONTEXT_TOO_LONG, CONTEXT_TOO_LONG)
    assert "question" not in (completed.error_message or "")  # Parley's words, never the text
    for e in _as_sent_turn(str(uuid.uuid4()), ["question " * 1000]):
        out = await builder.handle(e)
    [req] = out
    assert isinstance(req, ev.InferenceRequested) and len(req.messages) == 1


async def test_a_question_too_large_for_a_record_alone_ends_context_too_long(sealed: None) -> None:
    builder = ContextBuilder(CFG, Rows(), record_bytes=RECORD)
    out = await _conversation(builder, turns=1, size=40_000)
    assert [type(e) for e in out] == [ev.GenerationCompleted, ev.TokenChunk]
    assert out[0].error_code == CONTEXT_TOO_LONG  # type: ignore[attr-defined]


def test_a_token_budget_no_record_holds_is_named_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="streams.context")
    ContextBuilder(ContextSettings(budget_tokens=3072, tokenizer="words"), Rows(), record_bytes=512 * 1024)
    assert not caplog.records
    ContextBuilder(ContextSettings(budget_tokens=128_000, tokenizer="words"), Rows(), record_bytes=512 * 1024)
    [warning] = caplog.records
    assert "PARLEY_CONTEXT_BUDGET_TOKENS=128000" in warning.getMessage()
