"""Sealed fields: the codec seals every content field of an event and opens it again (schemas/sealing.py).

A stand-in key service (reversible, no cryptography) shows *which* fields are sealed and that every
reader opens them; the real AES-GCM service is tested against Cassandra (tests/integration/test_keys.py).
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import replace
from collections.abc import Iterator

import pytest

from gateway import chunk_reader
from schemas import codec, sealing
from schemas.events import (
    EVENT_TYPES,
    Citation,
    GenerationCompleted,
    InferenceRequested,
    MemoryFact,
    MemoryUpdated,
    MessagePosted,
    Passage,
    PromptMessage,
    Retrieval,
    TokenChunk,
)
from tools.analysts.records import Decoder

CID = "00000000-0000-0000-0000-0000000000c1"
MID = "00000000-0000-0000-0000-0000000000a1"


class Reversible:
    """Seals by base64 of the reversed text: what it seals is unreadable in the bytes, and opens again."""

    def __init__(self) -> None:
        self.prefetched: list[tuple[list[str], bool]] = []

    def seal(self, user_id: str, text: str, *, deterministic: bool = False) -> str:
        return f"{sealing.PREFIX}{user_id}:1:" + base64.b64encode(text[::-1].encode()).decode()

    def open(self, value: str) -> str:
        return base64.b64decode(value.rsplit(":", 1)[1]).decode()[::-1]

    def blind(self, user_id: str, term: str) -> str:
        return "b:" + term[::-1]

    async def prefetch(self, user_ids: object, *, create: bool = False) -> None:
        self.prefetched.append((sorted(user_ids), create))  # type: ignore[call-overload]


@pytest.fixture
def keys() -> Iterator[Reversible]:
    service = Reversible()
    sealing.install(service)
    yield service
    sealing.install(None)


def test_every_event_that_holds_content_names_its_owner() -> None:
    """A sealed field is sealed under the event's user_id: an event type without one could not be sealed."""
    holding = [cls for cls in EVENT_TYPES.values() if sealing.holds_sealed(cls)]
    assert len(holding) >= 10
    for cls in holding:
        assert "user_id" in {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_content_fields_are_sealed_on_the_wire_and_opened_on_decode(keys: Reversible) -> None:
    events = [
        MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="canary in a message", client_message_id="c"),
        GenerationCompleted(
            conversation_id=CID, user_id="u1", request_id=MID, parent_id=MID, finish_reason="stop", content="canary in a reply",
            citations=[Citation(number=1, document_id=CID, page=1, chunk_id=MID, text="canary quoted", filename="canary.pdf")],
            retrieval=Retrieval(path="hybrid", note="canary note"),
        ),  # fmt: skip
        InferenceRequested(
            conversation_id=CID, user_id="u1", request_id=MID, parent_id=MID, resume_text="canary resumed",
            messages=[PromptMessage(role="user", content="canary in a prompt")],
            retrieval=Retrieval(
                path="hybrid",
                passages=[Passage(label="[canary.pdf p.1]", document_id=CID, chunk_id=MID, page=1, text="canary passage")],
            ),
        ),  # fmt: skip
        MemoryUpdated(user_id="u1", facts=[MemoryFact(fact_id=MID, text="canary fact")]),
        TokenChunk(conversation_id=CID, user_id="u1", request_id=MID, seq=0, text="canary chunk", documents_note="canary"),
    ]
    for event in events:
        data = codec.encode(event)
        assert b"canary" not in data, type(event).__name__
        assert codec.decode(data) == event


def test_without_a_key_service_nothing_is_sealed_and_sealed_bytes_are_refused(keys: Reversible) -> None:
    event = MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="hello", client_message_id="c")
    sealed = codec.encode(event)
    sealing.install(None)
    assert b"hello" in codec.encode(event)
    with pytest.raises(sealing.SealedWithoutKeys):
        codec.decode(sealed)


def test_the_gateway_s_chunk_reader_and_the_analysts_decoder_open_what_the_codec_opens(keys: Reversible) -> None:
    chunk = TokenChunk(
        conversation_id=CID, user_id="u1", request_id=MID, seq=1, text="secret words", documents_note="a note", finish_reason="stop",
        citations=[Citation(number=1, document_id=CID, page=2, chunk_id=MID, text="a span", filename="f.pdf")],
    )  # fmt: skip
    data = codec.encode(chunk)
    assert chunk_reader.read(data, {MID}) == codec.decode(data) == chunk
    name, record = Decoder(["TokenChunk"])(data)  # type: ignore[misc]
    assert record["text"] == "secret words" and record["citations"][0]["filename"] == "f.pdf"


def test_a_projected_cell_is_sealed_deterministically(keys: Reversible) -> None:
    from streams.projection import sealed
    from streams.projection import Write

    write = Write("messages", (("conversation_id", CID),), (("content", "text"), ("role", "user")), 1)
    out = sealed(write, "u1", sealing.sealer())
    assert dict(out.cells)["role"] == "user" and sealing.is_sealed(dict(out.cells)["content"])
    assert sealing.open_text(dict(out.cells)["content"]) == "text"


async def test_the_async_codec_asks_for_the_keys_it_needs_before_the_synchronous_step(keys: Reversible) -> None:
    """On an event loop the keys are fetched first (off the loop, by the service): the owners its sealed
    values name and its user for decode; the owner, to be made if new, for encode; none for an event
    that holds no content."""
    event = MessagePosted(conversation_id=CID, user_id="u1", message_id=MID, content="hello", client_message_id="c")
    data = await codec.encode_async(event)
    assert keys.prefetched == [(["u1"], True)]
    other = GenerationCompleted(
        conversation_id=CID, user_id="u2", request_id=MID, parent_id=MID, finish_reason="stop", content=keys.seal("u3", "quoted")
    )  # a value sealed under another owner (as a copied one would be)
    keys.prefetched.clear()
    assert await codec.decode_async(data) == event
    assert await codec.decode_async(codec.encode(other)) == replace(other, content="quoted")
    assert keys.prefetched == [(["u1"], False), (["u2", "u3"], False)]
    keys.prefetched.clear()
    from schemas.events import ConversationDeleted

    gone = ConversationDeleted(conversation_id=CID, user_id="u1")
    assert not sealing.holds_sealed(ConversationDeleted)
    await codec.encode_async(gone)
    assert keys.prefetched == []


class OtherKey(Reversible):
    def blind(self, user_id: str, term: str) -> str:
        return "b:" + term.upper()


def test_ids_derived_from_content_are_keyed_by_the_owners_key(keys: Reversible) -> None:
    """Memory fact ids, OpenAI message keys: kept for good (user.memory, chat.events), so a guess of the
    text plus the user id must not reproduce them once the key is gone (review H8)."""
    from gateway.openai_request import ChatMessage, message_keys
    from streams.memory import fact

    history = (ChatMessage("user", "I live in Lisbon"),)
    mine = (fact("u1", "I live in Lisbon", sealing.sealer()).fact_id, message_keys("u1", history))
    assert mine == (fact("u1", "I live in Lisbon", sealing.sealer()).fact_id, message_keys("u1", history))  # stable under one key
    sealing.install(None)  # what a guesser without the key computes
    assert fact("u1", "I live in Lisbon", sealing.sealer()).fact_id != mine[0] and message_keys("u1", history) != mine[1]
    sealing.install(OtherKey())  # another key: other ids
    assert fact("u1", "I live in Lisbon", sealing.sealer()).fact_id != mine[0] and message_keys("u1", history) != mine[1]
